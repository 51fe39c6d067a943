#include "cohort/launcher/launch_template.h"

#include "cohort/launcher/options.h"

namespace cohort::launcher {
namespace {

constexpr std::string_view kHost = "{host}";

std::vector<std::string> split_words(std::string_view text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'' || c == '"') {
      const size_t close = text.find(c, i + 1);
      if (close == std::string_view::npos)
        throw UsageError("--launch-template '" + std::string(text) + "' has an unterminated " +
                         (c == '\'' ? "single" : "double") + " quote");
      word.append(text.substr(i + 1, close - i - 1));
      in_word = true;
      i = close;
    } else if (c == '\\') {
      if (i + 1 == text.size())
        throw UsageError("--launch-template '" + std::string(text) + "' ends in a backslash");
      word += text[++i];
      in_word = true;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

}  // namespace

LaunchTemplate::LaunchTemplate(std::string_view text) : text_(text), words_(split_words(text)) {
  if (words_.empty()) throw UsageError("--launch-template is empty (the default is '" +
                                       std::string(kDefaultLaunchTemplate) + "')");
  bool has_host = false;
  for (const std::string& w : words_) has_host = has_host || w.find(kHost) != std::string::npos;
  if (!has_host)
    throw UsageError("--launch-template '" + text_ +
                     "' has no {host}: it must say where to start each rank, e.g. 'ssh {host}'");
}

std::vector<std::string> LaunchTemplate::expand(const std::string& host, const std::vector<std::string>& command) const {
  std::vector<std::string> out;
  out.reserve(words_.size() + command.size());
  for (std::string w : words_) {
    for (size_t at = w.find(kHost); at != std::string::npos; at = w.find(kHost, at + host.size()))
      w.replace(at, kHost.size(), host);
    out.push_back(std::move(w));
  }
  out.insert(out.end(), command.begin(), command.end());
  return out;
}

bool is_shell_safe(std::string_view word) {
  if (word.empty()) return false;
  for (char c : word) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '-' || c == '.' || c == '/' || c == ':' || c == ',' || c == '=' || c == '+' || c == '@' ||
                    c == '%';
    if (!ok) return false;
  }
  return true;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) {
    if (!out.empty()) out += ' ';
    if (is_shell_safe(w)) {
      out += w;
      continue;
    }
    out += '\'';
    for (char c : w) {
      if (c == '\'') out += "'\\''";
      else out += c;
    }
    out += '\'';
  }
  return out;
}

}  // namespace cohort::launcher
