// The training text of char_lm: the fortunes of Debian's `fortunes` package.
//
// A fortune file is plain text in which a line holding only "%" ends each
// fortune. The corpus is every such file of a directory whose name has no
// extension (the .dat indexes and .u8 links are skipped, and so are
// subdirectories such as off/), read in name order so that every rank and
// every run sees the same text. Missing directory, unreadable file or no
// fortune at all: ConfigError naming the directory and the package.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cohort::examples::char_lm {

struct Corpus {
  std::string dir;
  std::vector<std::string> files;     // the names read, sorted
  std::vector<std::string> fortunes;  // each without its "%" line, ending in '\n'
  std::string text;                   // the fortunes in order, separated by an empty line
};

// The fortunes of one file's text. Empty (whitespace-only) fortunes are
// dropped; a last fortune without a closing "%" line still counts.
std::vector<std::string> split_fortunes(std::string_view file_text);

// Reads the corpus in `dir` (see the file comment). A TFRecord file, or a
// directory of *.tfrecord files, is read by load_corpus_records() instead.
Corpus load_corpus(const std::string& dir);

// The corpus from TFRecord text records ({text: bytes}, one line each, as
// `cohort-data convert text --out DIR FORTUNE_FILE...` writes them), read in
// order through cohort's input pipeline (workers decode the records ahead);
// the lines, joined, are split into fortunes as a fortune file would be.
// Converted from the same files in name order, the corpus equals
// load_corpus()'s of their directory. ConfigError for no records, a record
// without "text", or no fortune in them.
Corpus load_corpus_records(const std::string& path);

}  // namespace cohort::examples::char_lm
