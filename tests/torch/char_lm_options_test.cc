// The char_lm example's torch-free parts: flags and their checks against the
// world size, the fortune corpus (splitting, directory rules, errors), the
// character vocabulary and the deterministic batches.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "cohort/common/error.h"
#include "cohort/data/example.h"
#include "cohort/data/record_writer.h"
#include "examples/char_lm/batches.h"
#include "examples/char_lm/corpus.h"
#include "examples/char_lm/options.h"
#include "examples/char_lm/vocabulary.h"
#include "tests/data/temp_dir.h"               // error_of
#include "tests/launcher/cohortrun_process.h"  // TempDir

namespace cohort::testing::char_lm_options_test {
namespace {

using launcher::testing::TempDir;

namespace lm = cohort::examples::char_lm;

TEST(CharLmOptions, ParsesBothFlagForms) {
  const auto o = lm::parse_options({"--dp",
                                    "2",
                                    "--pp=2",
                                    "--tp",
                                    "1",
                                    "--micro-batches",
                                    "8",
                                    "--schedule",
                                    "gpipe",
                                    "--steps=7",
                                    "--batch-size",
                                    "64",
                                    "--seq-len",
                                    "16",
                                    "--lr",
                                    "0.01",
                                    "--optimizer",
                                    "sgd",
                                    "--seed",
                                    "9",
                                    "--d-model",
                                    "32",
                                    "--heads",
                                    "2",
                                    "--layers",
                                    "6",
                                    "--corpus",
                                    "/tmp/x",
                                    "--temperature",
                                    "0",
                                    "--prompt=Hi there",
                                    "--threads",
                                    "1",
                                    "--vocab-multiple",
                                    "16",
                                    "--sample-chars",
                                    "10",
                                    "--dtype",
                                    "float64"});
  EXPECT_EQ(o.dp, 2);
  EXPECT_EQ(o.pp, 2);
  EXPECT_EQ(o.tp, 1);
  EXPECT_EQ(o.micro_batches, 8);
  EXPECT_EQ(o.schedule, "gpipe");
  EXPECT_EQ(o.steps, 7);
  EXPECT_EQ(o.batch_size, 64);
  EXPECT_EQ(o.seq_len, 16);
  EXPECT_EQ(o.lr, 0.01);
  EXPECT_EQ(o.optimizer, "sgd");
  EXPECT_EQ(o.seed, 9u);
  EXPECT_EQ(o.d_model, 32);
  EXPECT_EQ(o.heads, 2);
  EXPECT_EQ(o.layers, 6);
  EXPECT_EQ(o.corpus, "/tmp/x");
  EXPECT_EQ(o.temperature, 0.0);
  EXPECT_EQ(o.prompt, "Hi there");
  EXPECT_EQ(o.threads, 1);
  EXPECT_EQ(o.vocab_multiple, 16);
  EXPECT_EQ(o.sample_chars, 10);
  EXPECT_EQ(o.dtype, "float64");
  EXPECT_FALSE(o.help);
  EXPECT_TRUE(lm::parse_options({"--help"}).help);
  // Defaults describe a one-rank run.
  const auto d = lm::parse_options({});
  EXPECT_EQ(d.dp * d.pp * d.tp, 1);
  EXPECT_NO_THROW(lm::check_world(d, 1));
}

TEST(CharLmOptions, RejectsBadFlagsWithTheirNames) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--dp", "x"}, "--dp expects a number, got 'x'"},
      {{"--tp", "0"}, "--dp, --pp and --tp must be at least 1"},
      {{"--schedule", "zigzag"}, "--schedule expects one of gpipe, 1f1b, got 'zigzag'"},
      {{"--dtype", "half"}, "--dtype expects one of float32, float64, got 'half'"},
      {{"--optimizer", "lamb"}, "--optimizer expects one of adam, sgd, got 'lamb'"},
      {{"--frobnicate"}, "unknown flag '--frobnicate'"},
      {{"--steps"}, "--steps needs a value"},
      {{"--steps", "0"}, "--steps must be at least 1"},
      {{"--micro-batches", "0"}, "--micro-batches must be at least 1"},
      {{"--lr", "-1"}, "--lr must be positive"},
      {{"--d-model", "30", "--heads", "4"}, "--d-model 30 must be a multiple of --heads 4"},
      {{"--temperature", "-0.5"}, "--temperature must not be negative"},
      {{"--batch-size", "12abc"}, "--batch-size expects a number, got '12abc'"},
  };
  for (const auto& [args, want] : cases) {
    const std::string what = error_of<ConfigError>([&] { lm::parse_options(args); });
    EXPECT_NE(what.find(want), std::string::npos) << "args " << args[0] << ": '" << what << "'";
  }
}

TEST(CharLmOptions, MeshMustMatchTheWorldAndTheModel) {
  auto with = [](std::vector<std::string> args) { return lm::parse_options(args); };
  // Every factorisation of 4 is accepted at world size 4 with the defaults.
  for (auto [dp, pp, tp] :
       std::vector<std::tuple<int, int, int>>{{4, 1, 1}, {2, 2, 1}, {2, 1, 2}, {1, 2, 2}, {1, 4, 1}, {1, 1, 4}}) {
    const auto o = with({"--dp", std::to_string(dp), "--pp", std::to_string(pp), "--tp", std::to_string(tp)});
    EXPECT_NO_THROW(lm::check_world(o, 4)) << dp << "x" << pp << "x" << tp;
  }
  EXPECT_NE(error_of<ConfigError>([&] {
              lm::check_world(with({"--dp", "2", "--pp", "2", "--tp", "2"}), 4);
            }).find("--dp 2 x --pp 2 x --tp 2 = 8 ranks, but the job has 4"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] {
              lm::check_world(with({"--dp", "2"}), 1);
            }).find("= 2 ranks, but the job has 1"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] {
              lm::check_world(with({"--pp", "4", "--layers", "2"}), 4);
            }).find("--layers 2 cannot fill --pp 4 stages"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] {
              lm::check_world(with({"--tp", "4", "--heads", "2", "--d-model", "8"}), 4);
            }).find("--heads 2 must be a multiple of --tp 4"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] {
              lm::check_world(with({"--tp", "2", "--vocab-multiple", "3"}), 2);
            }).find("--vocab-multiple 3 must be a multiple of --tp 2"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>([&] {
              lm::check_world(with({"--dp", "4", "--batch-size", "8", "--micro-batches", "4"}), 4);
            }).find("--batch-size 8 must be a multiple of --dp 4 x --micro-batches 4 = 16"),
            std::string::npos);
}

TEST(CharLmCorpus, SplitsFortunesOnPercentLines) {
  EXPECT_EQ(lm::split_fortunes("one\nline\n%\ntwo\n%\n"), (std::vector<std::string>{"one\nline\n", "two\n"}));
  // No closing "%", CRLF line ends, blank fortunes and a "%" inside a line.
  EXPECT_EQ(lm::split_fortunes("a\r\n%\r\n\n  \n%\n50% off\nb"), (std::vector<std::string>{"a\n", "50% off\nb\n"}));
  EXPECT_TRUE(lm::split_fortunes("").empty());
  EXPECT_TRUE(lm::split_fortunes("%\n%\n").empty());
}

TEST(CharLmCorpus, ReadsFilesWithoutExtensionInNameOrder) {
  TempDir d;
  d.write("zeta", "last\n%\n");
  d.write("alpha", "first\n%\nsecond\n%\n");
  d.write("alpha.dat", "binary index, skipped\n%\n");
  d.write("alpha.u8", "a copy, skipped\n%\n");
  std::filesystem::create_directory(d.path() + "/off");
  d.write("off/rude", "skipped\n%\n");
  const lm::Corpus c = lm::load_corpus(d.path());
  EXPECT_EQ(c.files, (std::vector<std::string>{"alpha", "zeta"}));
  EXPECT_EQ(c.fortunes, (std::vector<std::string>{"first\n", "second\n", "last\n"}));
  EXPECT_EQ(c.text, "first\n\nsecond\n\nlast\n");
}

TEST(CharLmCorpus, TfRecordTextRecordsThroughThePipelineGiveTheSameCorpus) {
  TempDir d;
  d.write("zeta", "last\n%\n");
  d.write("alpha", "first\nline\n%\n\nsecond\n%\n");
  const lm::Corpus want = lm::load_corpus(d.path());
  // The lines of alpha then zeta, one tf.train.Example {text} each, over two
  // shards (as `cohort-data convert text --shards 2 alpha zeta` deals them).
  std::filesystem::create_directory(d.path() + "/records");
  const std::vector<std::string> lines = {"first", "line", "%", "", "second", "%", "last", "%"};
  for (int shard = 0; shard < 2; ++shard) {
    data::RecordWriter w(d.path() + "/records/corpus-0000" + std::to_string(shard) + "-of-00002.tfrecord");
    for (size_t i = size_t(shard) * 4; i < size_t(shard) * 4 + 4; ++i) {
      data::Features f;
      f.set("text", data::Feature::bytes({lines[i]}));
      w.write(data::build_example(f));
    }
    w.close();
  }
  const lm::Corpus got = lm::load_corpus(d.path() + "/records");
  EXPECT_EQ(got.fortunes, want.fortunes);
  EXPECT_EQ(got.text, want.text);
  EXPECT_EQ(got.files.size(), 2u);
  // Records without fortunes are a clear error.
  data::RecordWriter w(d.path() + "/empty.tfrecord");
  data::Features f;
  f.set("text", data::Feature::bytes({"%"}));
  w.write(data::build_example(f));
  w.close();
  const std::string empty = error_of<ConfigError>([&] { lm::load_corpus(d.path() + "/empty.tfrecord"); });
  EXPECT_NE(empty.find("no fortunes in the 1 records of"), std::string::npos) << empty;
}

TEST(CharLmCorpus, MissingOrEmptyCorpusIsAClearError) {
  const std::string missing = error_of<ConfigError>([] { lm::load_corpus("/nonexistent/fortunes"); });
  EXPECT_NE(missing.find("fortune directory /nonexistent/fortunes not found"), std::string::npos) << missing;
  EXPECT_NE(missing.find("'fortunes' package"), std::string::npos) << missing;
  TempDir d;
  d.write("blank", "%\n  \n%\n");
  d.write("index.dat", "x");
  const std::string empty = error_of<ConfigError>([&] { lm::load_corpus(d.path()); });
  EXPECT_NE(empty.find("no fortunes in " + d.path()), std::string::npos) << empty;
}

TEST(CharLmVocabulary, SortedBytesWithFallbackAndPadding) {
  const auto v = lm::Vocabulary::from_text("hello world\n");
  EXPECT_EQ(v.size(), 9);  // '\n' ' ' d e h l o r w
  EXPECT_EQ(v.id_of('\n'), 0);
  EXPECT_EQ(v.id_of(' '), 1);
  EXPECT_EQ(v.id_of('w'), 8);
  EXPECT_EQ(v.decode(v.encode("hello world\n")), "hello world\n");
  EXPECT_FALSE(v.contains('Z'));
  EXPECT_EQ(v.id_of('Z'), v.id_of(' '));  // unseen bytes become spaces
  EXPECT_EQ(v.decode(v.encode("HeLLo")), " e  o");
  EXPECT_EQ(v.padded_size(8), 16);
  EXPECT_EQ(v.padded_size(1), 9);
  EXPECT_EQ(v.padded_size(9), 9);
  EXPECT_NE(error_of<ConfigError>([&] { v.byte_of(9); }).find("character id 9 outside the vocabulary of 9"),
            std::string::npos);
  EXPECT_EQ(lm::Vocabulary::from_text("ba").fallback_id(), 0);  // no space: id 0
  // Bytes above 127 (UTF-8) are characters like any other.
  EXPECT_EQ(lm::Vocabulary::from_text("\xc3\xa9").size(), 2);
  EXPECT_THROW(lm::Vocabulary::from_text(""), ConfigError);
}

TEST(CharLmBatches, GlobalBatchIsTheSameWhateverTheReplicaSplit) {
  std::vector<int64_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int64_t(i);
  const lm::WindowBatches batches(tokens, 8, 42);
  const int64_t batch = 12;
  const auto whole = batches.rows(3, {0, batch});
  ASSERT_EQ(whole.size(), size_t(batch * 9));
  for (int dp : {1, 2, 3, 4, 6, 12}) {
    std::vector<int64_t> joined;
    for (int r = 0; r < dp; ++r) {
      const auto part = batches.rows(3, lm::replica_rows(batch, dp, r));
      joined.insert(joined.end(), part.begin(), part.end());
    }
    EXPECT_EQ(joined, whole) << "dp " << dp;
  }
  // Windows are consecutive tokens, inside the text, and differ across rows
  // and steps; the same seed gives the same batches, another seed others.
  std::set<int64_t> starts;
  for (int64_t row = 0; row < batch; ++row) {
    const int64_t s = whole[size_t(row * 9)];
    for (int64_t j = 0; j < 9; ++j) EXPECT_EQ(whole[size_t(row * 9 + j)], s + j);
    EXPECT_LE(s + 9, 1000);
    starts.insert(s);
  }
  EXPECT_GT(starts.size(), 8u);
  EXPECT_NE(batches.rows(4, {0, batch}), whole);
  EXPECT_EQ(lm::WindowBatches(tokens, 8, 42).rows(3, {0, batch}), whole);
  EXPECT_NE(lm::WindowBatches(tokens, 8, 43).rows(3, {0, batch}), whole);
  // The last possible window is reachable and nothing runs past the end.
  const lm::WindowBatches tight(std::vector<int64_t>(10, 1), 8, 1);
  for (int64_t step = 0; step < 50; ++step) EXPECT_LE(tight.window_start(step, 0), 1);
  EXPECT_THROW(lm::WindowBatches(std::vector<int64_t>(9, 1), 8, 1), ConfigError);
  EXPECT_THROW(lm::replica_rows(10, 4, 0), ConfigError);
}

TEST(CharLmCorpus, TheInstalledFortunesLoadWhenPresent) {
  // The package is a build dependency of the example; skip quietly where it
  // is not installed (the error path is tested above).
  if (!std::filesystem::is_directory("/usr/share/games/fortunes")) GTEST_SKIP() << "fortunes not installed";
  const lm::Corpus c = lm::load_corpus("/usr/share/games/fortunes");
  EXPECT_GT(c.fortunes.size(), 1000u);
  for (const auto& f : c.files) EXPECT_EQ(f.find('.'), std::string::npos) << f;
  const auto v = lm::Vocabulary::from_text(c.text);
  EXPECT_GT(v.size(), 60);
  EXPECT_LE(v.size(), 256);
}

}  // namespace
}  // namespace cohort::testing::char_lm_options_test
