// Tests of `trainer pack` (src/data/packer.h, tokenizer.h, progress.h, src/cli/pack_command.cpp):
// the files written are read back with the HDF5 C API and compared with the bytes the test wrote.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "cli/commands.h"
#include "common/filesystem.h"
#include "data/dataset.h"
#include "data/packer.h"
#include "data/progress.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::FileContents;
using testing_data::FileExists;
using testing_data::ReadPackedFile;
using testing_data::WriteBytes;
using testing_data::WriteRawTokens;

// The expected byte-tokenizer stream: each document's bytes, then 256.
std::vector<uint32_t> ByteStream(const std::vector<std::string>& documents,
                                 std::vector<uint64_t>* offsets) {
  std::vector<uint32_t> tokens;
  offsets->assign(1, 0);
  for (const std::string& doc : documents) {
    for (unsigned char c : doc) tokens.push_back(c);
    tokens.push_back(256);
    offsets->push_back(tokens.size());
  }
  return tokens;
}

std::string Repeat(char c, size_t n) {
  return std::string(n, c);
}

class PackTest : public DataTest {
 protected:
  PackOptions Options(const std::vector<std::string>& names, const std::string& output) {
    PackOptions options;
    for (const std::string& name : names) options.inputs.push_back(Path(name));
    options.output = Path(output);
    options.show_progress = false;
    return options;
  }
  Status Pack(const PackOptions& options) { return PackDataset(options, &summary_); }
  void ExpectNoTemporaries() {
    for (const auto& entry : std::filesystem::directory_iterator(dir_))
      EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  }
  PackSummary summary_;
};

TEST_F(PackTest, BytesKnownContents) {
  const std::vector<std::string> docs = {"hello", "w\xc3\xb6rld\n\x00\xff", "abc"};
  WriteBytes(Path("a.txt"), docs[0]);
  WriteBytes(Path("empty.txt"), "");
  WriteBytes(Path("b.txt"), std::string(docs[1].c_str(), 9));
  WriteBytes(Path("c.txt"), docs[2]);
  std::vector<std::string> written = {docs[0], std::string(docs[1].c_str(), 9), docs[2]};
  ASSERT_EQ(written[1].size(), 9u);
  Status status = Pack(Options({"a.txt", "empty.txt", "b.txt", "c.txt"}, "data.h5"));
  ASSERT_TRUE(status.ok()) << status.message();

  std::vector<uint64_t> offsets;
  std::vector<uint32_t> expected = ByteStream(written, &offsets);
  FileContents c = ReadPackedFile(Path("data.h5"));
  EXPECT_EQ(c.tokens, expected);
  EXPECT_EQ(c.doc_offsets, offsets);
  EXPECT_EQ(c.token_type_size, 2u);
  EXPECT_TRUE(c.token_type_unsigned);
  EXPECT_TRUE(c.tokens_chunked);
  EXPECT_EQ(c.format_version, 1);
  EXPECT_EQ(c.vocab_size, 257);
  EXPECT_EQ(c.eod_id, 256);
  EXPECT_EQ(c.tokenizer, "bytes");
  EXPECT_EQ(summary_.documents, 3);
  EXPECT_EQ(summary_.empty_inputs, 1);
  EXPECT_EQ(summary_.tokens, static_cast<int64_t>(expected.size()));
  ASSERT_EQ(summary_.files.size(), 1u);
  EXPECT_NE(summary_.OneLine().find("3 documents"), std::string::npos) << summary_.OneLine();
  EXPECT_NE(summary_.OneLine().find(Path("data.h5")), std::string::npos);
  EXPECT_FALSE(FileExists(Path("data.val.h5")));
  ExpectNoTemporaries();
}

// Two packs of one --output at once (two jobs, a requeue): each writes a temporary file of its own,
// so this one neither truncates nor renames nor removes the other's (a fixed name did all three);
// one that a killed pack of this host left (its pid gone) is removed.
TEST_F(PackTest, AnotherPacksTemporaryFileIsLeftAlone) {
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  const std::string live = std::string("data.h5.") + host + "-1.tmp";  // pid 1 lives
  const std::string dead = std::string("data.h5.") + host + "-999999999.tmp";
  const std::vector<std::string> others = {"data.h5.tmp", "data.h5.otherhost-5.tmp", live};
  WriteBytes(Path("a.txt"), "hello");
  for (const std::string& other : others) WriteBytes(Path(other), "theirs");
  WriteBytes(Path(dead), "killed");
  Status status = Pack(Options({"a.txt"}, "data.h5"));
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(ReadPackedFile(Path("data.h5")).tokens.size(), 6u);
  for (const std::string& other : others) {
    std::ifstream in(Path(other), std::ios::binary);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "theirs") << other;
  }
  EXPECT_FALSE(FileExists(Path(dead)));
}

TEST_F(PackTest, TinyReadAndChunkSizesGiveTheSameFile) {
  const std::vector<std::string> docs = {Repeat('x', 37) + "yz", "0123456789abcdef", "q"};
  for (size_t i = 0; i < docs.size(); ++i) WriteBytes(Path("d" + std::to_string(i)), docs[i]);
  PackOptions options = Options({"d0", "d1", "d2"}, "data.h5");
  options.read_chunk_bytes = 3;
  options.chunk_tokens = 4;
  ASSERT_TRUE(Pack(options).ok());
  std::vector<uint64_t> offsets;
  EXPECT_EQ(ReadPackedFile(Path("data.h5")).tokens, ByteStream(docs, &offsets));
}

TEST_F(PackTest, ValidationSplitCutsAtDocumentBoundary) {
  // Documents of 100..400 bytes: 101, 201, 301, 401 tokens with their eod; starts 0,101,302,603.
  std::vector<std::string> docs;
  for (int i = 1; i <= 4; ++i) {
    docs.push_back(Repeat(static_cast<char>('a' + i), 100 * i));
    WriteBytes(Path("doc" + std::to_string(i)), docs.back());
  }
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> stream = ByteStream(docs, &offsets);
  // 30% of 1004 = 301 tokens wanted: the nearest allowed boundary to 703 is 603 (one document).
  PackOptions options = Options({"doc1", "doc2", "doc3", "doc4"}, "data.h5");
  options.val_fraction = 0.3;
  ASSERT_TRUE(Pack(options).ok());
  FileContents train = ReadPackedFile(Path("data.h5"));
  FileContents val = ReadPackedFile(Path("data.val.h5"));
  EXPECT_EQ(train.tokens, std::vector<uint32_t>(stream.begin(), stream.begin() + 603));
  EXPECT_EQ(train.doc_offsets, (std::vector<uint64_t>{0, 101, 302, 603}));
  EXPECT_EQ(val.tokens, std::vector<uint32_t>(stream.begin() + 603, stream.end()));
  EXPECT_EQ(val.doc_offsets, (std::vector<uint64_t>{0, 401}));
  EXPECT_EQ(val.vocab_size, 257);
  EXPECT_EQ(val.tokenizer, "bytes");
  ASSERT_EQ(summary_.files.size(), 2u);
  EXPECT_EQ(summary_.files[1].path, Path("data.val.h5"));
  EXPECT_EQ(summary_.files[1].tokens, 401);
  ExpectNoTemporaries();

  // 70% wanted (703 tokens): the nearest boundary to 301 is 302.
  options.output = Path("seventy.h5");
  options.val_fraction = 0.7;
  ASSERT_TRUE(Pack(options).ok());
  train = ReadPackedFile(Path("seventy.h5"));
  val = ReadPackedFile(Path("seventy.val.h5"));
  EXPECT_EQ(train.doc_offsets, (std::vector<uint64_t>{0, 101, 302}));
  EXPECT_EQ(val.doc_offsets, (std::vector<uint64_t>{0, 301, 702}));
  EXPECT_EQ(val.tokens, std::vector<uint32_t>(stream.begin() + 302, stream.end()));
}

// Document starts are written as they come, a buffer of 8192 at a time: 20,000 JSON Lines
// documents of 1-9 bytes (empty lines skipped), with and without a split, against the starts
// and cut computed here from the lines' lengths.
TEST_F(PackTest, DocumentStartsOfManyDocumentsStreamToTheFile) {
  std::string lines;
  std::vector<uint64_t> starts{0};  // each non-empty line's bytes and its eod
  for (int i = 0; i < 20000; ++i) {
    const int length = (i * 7) % 10;  // 0 (skipped) to 9
    lines += "{\"text\": \"" + Repeat('a', length) + "\"}\n";
    if (length > 0) starts.push_back(starts.back() + length + 1);
  }
  WriteBytes(Path("many.jsonl"), lines);
  PackOptions options = Options({"many.jsonl"}, "whole.h5");
  options.input_format = "jsonl";
  ASSERT_TRUE(Pack(options).ok());
  EXPECT_EQ(ReadPackedFile(Path("whole.h5")).doc_offsets, starts);
  EXPECT_EQ(summary_.documents, static_cast<int64_t>(starts.size()) - 1);

  options.output = Path("split.h5");
  options.val_fraction = 0.25;
  ASSERT_TRUE(Pack(options).ok());
  const uint64_t cut = *ValidationCut(starts, 0.25);
  ASSERT_GT(cut, 0u);
  const auto at_cut = std::find(starts.begin(), starts.end(), cut);
  ASSERT_NE(at_cut, starts.end());  // many documents: the cut is a boundary
  std::vector<uint64_t> train(starts.begin(), at_cut + 1), val;
  for (auto it = at_cut; it != starts.end(); ++it) val.push_back(*it - cut);
  EXPECT_EQ(ReadPackedFile(Path("split.h5")).doc_offsets, train);
  EXPECT_EQ(ReadPackedFile(Path("split.val.h5")).doc_offsets, val);
  ASSERT_EQ(summary_.files.size(), 2u);
  EXPECT_EQ(summary_.files[0].documents, static_cast<int64_t>(train.size()) - 1);
  EXPECT_EQ(summary_.files[1].documents, static_cast<int64_t>(val.size()) - 1);
}

TEST_F(PackTest, ValidationSplitOfOneDocumentCutsAtTokenPosition) {
  std::string text;
  for (int i = 0; i < 999; ++i) text.push_back(static_cast<char>(i * 7 % 251));
  WriteBytes(Path("one.txt"), text);
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> stream = ByteStream({text}, &offsets);  // 1000 tokens
  PackOptions options = Options({"one.txt"}, "data.h5");
  options.val_fraction = 0.1;
  options.val_output = Path("held_out.h5");
  options.chunk_tokens = 64;  // several chunks, the cut inside one
  ASSERT_TRUE(Pack(options).ok());
  FileContents train = ReadPackedFile(Path("data.h5"));
  FileContents val = ReadPackedFile(Path("held_out.h5"));
  EXPECT_EQ(train.tokens, std::vector<uint32_t>(stream.begin(), stream.begin() + 900));
  EXPECT_EQ(val.tokens, std::vector<uint32_t>(stream.begin() + 900, stream.end()));
  EXPECT_EQ(train.doc_offsets, (std::vector<uint64_t>{0, 900}));
  EXPECT_EQ(val.doc_offsets, (std::vector<uint64_t>{0, 100}));
  EXPECT_FALSE(FileExists(Path("data.val.h5")));
}

// A byte tokenizer that cannot tell token counts from sizes, like a BPE tokenizer: packing with a
// split then takes a counting pass, which must give the same files.
class CountlessByteTokenizer final : public Tokenizer {
 public:
  std::string name() const override { return "countless"; }
  int64_t vocab_size() const override { return 257; }
  int64_t eod_id() const override { return 256; }
  void BeginDocument(const std::string& source) override { bytes_.BeginDocument(source); }
  Status Encode(const uint8_t* b, size_t n, std::vector<uint32_t>* tokens) override {
    ++encode_calls;
    return bytes_.Encode(b, n, tokens);
  }
  Status EndDocument(std::vector<uint32_t>* tokens) override { return bytes_.EndDocument(tokens); }
  int encode_calls = 0;

 private:
  ByteTokenizer bytes_;
};

TEST_F(PackTest, TokenizersWithoutSizeCountsGetACountingPass) {
  std::vector<std::string> docs = {Repeat('a', 300), Repeat('b', 100), "", Repeat('c', 50)};
  for (size_t i = 0; i < docs.size(); ++i) WriteBytes(Path("d" + std::to_string(i)), docs[i]);
  docs.erase(docs.begin() + 2);
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> stream = ByteStream(docs, &offsets);  // starts 0, 301, 402; total 453
  PackOptions options = Options({"d0", "d1", "d2", "d3"}, "data.h5");
  options.val_fraction = 0.3;  // 136 wanted: the nearest boundary to 317 is 301
  CountlessByteTokenizer tokenizer;
  ASSERT_TRUE(PackDatasetWithTokenizer(options, &tokenizer, &summary_).ok());
  EXPECT_EQ(tokenizer.encode_calls, 6);  // three non-empty files, read twice
  FileContents train = ReadPackedFile(Path("data.h5"));
  FileContents val = ReadPackedFile(Path("data.val.h5"));
  EXPECT_EQ(train.tokens, std::vector<uint32_t>(stream.begin(), stream.begin() + 301));
  EXPECT_EQ(val.tokens, std::vector<uint32_t>(stream.begin() + 301, stream.end()));
  EXPECT_EQ(val.doc_offsets, (std::vector<uint64_t>{0, 101, 152}));
  EXPECT_EQ(train.tokenizer, "countless");
  EXPECT_EQ(summary_.empty_inputs, 1);
}

TEST_F(PackTest, SplitFilesTakeNoMoreSpaceThanTheirTokens) {
  std::string text;
  for (int i = 0; i < 400000; ++i) text.push_back(static_cast<char>('a' + i % 26));
  WriteBytes(Path("one.txt"), text);
  PackOptions options = Options({"one.txt"}, "data.h5");
  options.val_fraction = 0.5;
  options.chunk_tokens = 4096;
  ASSERT_TRUE(Pack(options).ok());
  // 200001 uint16 tokens each, plus headers and chunk rounding: far below the 800 KB a file would
  // take if it held the whole stream.
  EXPECT_LT(std::filesystem::file_size(Path("data.h5")), 420000u);
  EXPECT_LT(std::filesystem::file_size(Path("data.val.h5")), 420000u);
}

TEST_F(PackTest, ValidationCutRules) {
  // One document: a token position, each side >= 2 tokens.
  EXPECT_EQ(*ValidationCut({0, 10}, 0.25), 7);  // round(2.5) = 3 validation tokens
  EXPECT_EQ(*ValidationCut({0, 10}, 0.01), 8);  // at least 2 validation tokens
  EXPECT_EQ(*ValidationCut({0, 10}, 0.99), 2);  // at least 2 training tokens
  EXPECT_EQ(ValidationCut({0, 3}, 0.5).status().code(), ExitCode::kData);
  // Several documents: a boundary, never 0 or the end.
  EXPECT_EQ(*ValidationCut({0, 5, 10}, 0.001), 5);
  EXPECT_EQ(*ValidationCut({0, 5, 10}, 0.999), 5);
  EXPECT_EQ(*ValidationCut({0, 1, 2, 3, 100}, 0.5), 3);
}

TEST_F(PackTest, PretokenizedUint16) {
  const std::vector<uint32_t> doc1 = {10, 20, 50256, 7}, doc2 = {65535 % 50257, 0};
  WriteRawTokens(Path("a.bin"), doc1, 2);
  WriteRawTokens(Path("b.bin"), doc2, 2);
  PackOptions options = Options({"a.bin", "b.bin"}, "data.h5");
  options.tokenizer = "u16";
  options.vocab_size = 50257;
  options.read_chunk_bytes = 3;  // tokens cut across reads
  ASSERT_TRUE(Pack(options).ok()) << summary_.OneLine();
  FileContents c = ReadPackedFile(Path("data.h5"));
  EXPECT_EQ(c.tokens, (std::vector<uint32_t>{10, 20, 50256, 7, 50256, 65535 % 50257, 0, 50256}));
  EXPECT_EQ(c.doc_offsets, (std::vector<uint64_t>{0, 5, 8}));
  EXPECT_EQ(c.token_type_size, 2u);
  EXPECT_EQ(c.vocab_size, 50257);
  EXPECT_EQ(c.eod_id, 50256);
  EXPECT_EQ(c.tokenizer, "u16");
}

TEST_F(PackTest, PretokenizedUint32WithLargeVocabularyStoresUint32) {
  const std::vector<uint32_t> doc = {70000, 99998, 5, 65536};
  WriteRawTokens(Path("a.bin"), doc, 4);
  PackOptions options = Options({"a.bin"}, "data.h5");
  options.tokenizer = "u32";
  options.vocab_size = 100000;
  options.eod_id = 3;
  ASSERT_TRUE(Pack(options).ok());
  FileContents c = ReadPackedFile(Path("data.h5"));
  EXPECT_EQ(c.tokens, (std::vector<uint32_t>{70000, 99998, 5, 65536, 3}));
  EXPECT_EQ(c.token_type_size, 4u);
  EXPECT_EQ(c.vocab_size, 100000);
  EXPECT_EQ(c.eod_id, 3);
  EXPECT_EQ(c.tokenizer, "u32");
  // The reader agrees.
  auto opened = TokenDataset::Open(Path("data.h5"), 100000);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::vector<int32_t> in(2), out(2);
  ASSERT_TRUE((*opened)->ReadSamples({1}, 2, in.data(), out.data()).ok());
  EXPECT_EQ(in, (std::vector<int32_t>{5, 65536}));
  EXPECT_EQ(out, (std::vector<int32_t>{65536, 3}));
}

TEST_F(PackTest, PretokenizedErrorsNameTheFile) {
  WriteBytes(Path("odd.bin"), "abc");  // 3 bytes: not whole uint16 tokens
  PackOptions options = Options({"odd.bin"}, "data.h5");
  options.tokenizer = "u16";
  options.vocab_size = 50257;
  Status odd = Pack(options);
  EXPECT_EQ(odd.code(), ExitCode::kData);
  EXPECT_NE(odd.message().find(Path("odd.bin")), std::string::npos) << odd.message();

  WriteRawTokens(Path("ok.bin"), {1, 2, 3}, 2);
  WriteRawTokens(Path("big.bin"), {1, 2, 60000}, 2);
  WriteBytes(Path("data.h5"), "previous output");
  options.inputs = {Path("ok.bin"), Path("big.bin")};
  options.force = true;  // replace it, were the pack to succeed
  Status big = Pack(options);
  EXPECT_EQ(big.code(), ExitCode::kData);
  EXPECT_NE(big.message().find(Path("big.bin")), std::string::npos) << big.message();
  EXPECT_NE(big.message().find("60000"), std::string::npos) << big.message();
  // A failed pack leaves the previous file alone and no temporaries behind.
  std::ifstream previous(Path("data.h5"));
  std::stringstream text;
  text << previous.rdbuf();
  EXPECT_EQ(text.str(), "previous output");
  ExpectNoTemporaries();
}

TEST_F(PackTest, TokenizerChoiceErrorsAreUsageErrors) {
  EXPECT_EQ(MakeTokenizer("bpe", 0, -1).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("u16", 0, -1).status().code(), ExitCode::kUsage);  // needs vocab
  EXPECT_EQ(MakeTokenizer("u16", 70000, -1).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("u16", 100, 100).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("bytes", 300, -1).status().code(), ExitCode::kUsage);
  EXPECT_TRUE(MakeTokenizer("u32", int64_t{1} << 32, -1).ok());
  auto bytes = MakeTokenizer("bytes", 0, -1);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ((*bytes)->vocab_size(), 257);
  EXPECT_EQ((*bytes)->eod_id(), 256);
}

TEST_F(PackTest, MissingInputIsNamed) {
  WriteBytes(Path("a.txt"), "abc");
  Status status = Pack(Options({"a.txt", "missing.txt"}, "data.h5"));
  EXPECT_EQ(status.code(), ExitCode::kData);
  EXPECT_NE(status.message().find(Path("missing.txt")), std::string::npos) << status.message();
  EXPECT_FALSE(FileExists(Path("data.h5")));
  ExpectNoTemporaries();
}

TEST_F(PackTest, EmptyInputIsAnError) {
  WriteBytes(Path("a.txt"), "");
  WriteBytes(Path("b.txt"), "");
  Status status = Pack(Options({"a.txt", "b.txt"}, "data.h5"));
  EXPECT_EQ(status.code(), ExitCode::kData);
  EXPECT_NE(status.message().find("empty input"), std::string::npos) << status.message();
  EXPECT_FALSE(FileExists(Path("data.h5")));
  ExpectNoTemporaries();
}

TEST_F(PackTest, UnwritableOutputFolder) {
  WriteBytes(Path("a.txt"), "abc");
  Status status = Pack(Options({"a.txt"}, "no/such/folder/data.h5"));
  EXPECT_EQ(status.code(), ExitCode::kData);
  EXPECT_NE(status.message().find(Path("no/such/folder")), std::string::npos) << status.message();
  if (geteuid() == 0) GTEST_SKIP() << "root ignores folder permissions";
  std::filesystem::create_directories(Path("locked"));
  std::filesystem::permissions(
      Path("locked"), std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
  status = Pack(Options({"a.txt"}, "locked/data.h5"));
  std::filesystem::permissions(Path("locked"), std::filesystem::perms::owner_all);
  EXPECT_EQ(status.code(), ExitCode::kData);
  EXPECT_NE(status.message().find("not writable"), std::string::npos) << status.message();
}

TEST_F(PackTest, ExistingOutputsNeedForce) {
  WriteBytes(Path("a.txt"), "hello world");
  WriteBytes(Path("b.txt"), "another text");
  PackOptions split = Options({"a.txt"}, "data.h5");
  split.val_fraction = 0.5;
  ASSERT_TRUE(Pack(split).ok());
  // Again, with or without a split: refused, both files named, nothing changed.
  PackOptions whole = Options({"b.txt"}, "data.h5");
  for (const PackOptions& options : {split, whole}) {
    Status again = Pack(options);
    EXPECT_EQ(again.exit_code(), 2) << again.message();
    EXPECT_NE(again.message().find("output exists (" + Path("data.h5") + ", " +
                                   Path("data.val.h5") + "; trainer pack --output"),
              std::string::npos)
        << again.message();
    EXPECT_NE(again.message().find("--force"), std::string::npos) << again.message();
  }
  EXPECT_EQ(ReadPackedFile(Path("data.h5")).tokens.size(), 6u);
  // A stale validation file alone (its training file gone) still pairs with a new pack.
  std::filesystem::remove(Path("data.h5"));
  Status stale = Pack(whole);
  EXPECT_EQ(stale.exit_code(), 2);
  EXPECT_NE(stale.message().find("is the validation file of an earlier pack"), std::string::npos)
      << stale.message();
  // --force without a split: the new file, and the stale validation file removed.
  whole.force = true;
  ASSERT_TRUE(Pack(whole).ok());
  EXPECT_EQ(ReadPackedFile(Path("data.h5")).tokens.size(), 13u);
  EXPECT_FALSE(FileExists(Path("data.val.h5")));
  EXPECT_EQ(summary_.removed, Path("data.val.h5"));
  EXPECT_NE(summary_.OneLine().find("removed the stale " + Path("data.val.h5")), std::string::npos);
  // --force with a split: both replaced.
  split.force = true;
  ASSERT_TRUE(Pack(split).ok());
  EXPECT_EQ(ReadPackedFile(Path("data.h5")).tokens.size(), 6u);
  EXPECT_EQ(ReadPackedFile(Path("data.val.h5")).tokens.size(), 6u);
  ExpectNoTemporaries();
}

// --val-output naming --output's file by another spelling is refused at once, naming both.
TEST_F(PackTest, ValidationOutputMustBeAnotherFile) {
  WriteBytes(Path("a.txt"), "hello world");
  WriteBytes(Path("b.txt"), "second document");
  PackOptions options = Options({"a.txt", "b.txt"}, "d.h5");
  options.val_fraction = 0.5;
  for (const std::string& same : {Path("d.h5"), Path(".") + "/./d.h5", Path("sub/../d.h5")}) {
    std::filesystem::create_directories(Path("sub"));
    options.val_output = same;
    Status status = Pack(options);
    EXPECT_EQ(status.code(), ExitCode::kUsage) << same;
    EXPECT_NE(status.message().find("--val-output " + same + " is the same file as --output " +
                                    Path("d.h5")),
              std::string::npos)
        << status.message();
    EXPECT_FALSE(FileExists(Path("d.h5")));
  }
  options.val_output = Path("sub/d.h5");
  ASSERT_TRUE(Pack(options).ok());
  EXPECT_TRUE(FileExists(Path("sub/d.h5")));
}

// Without a split, --force removes an existing --val-output file as stale (a validation file
// of an earlier split that would pair with the new output), but never an input or the output
// itself: those are refused first (they were removed, exit 0).
TEST_F(PackTest, StaleValidationFileIsNeverAnInputOrTheOutput) {
  WriteBytes(Path("a.txt"), "hello world");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a.txt", "--val-output " + Path("a.txt") + " is also an input"},
      {"d.h5", "--val-output " + Path("d.h5") + " is the same file as --output"}};
  for (const auto& [named, refusal] : cases) {
    WriteBytes(Path("d.h5"), "an earlier output");
    PackOptions options = Options({"a.txt"}, "d.h5");
    options.force = true;
    options.val_output = Path(named);
    Status status = Pack(options);
    EXPECT_EQ(status.code(), ExitCode::kUsage) << named;
    EXPECT_NE(status.message().find(refusal), std::string::npos) << status.message();
    EXPECT_TRUE(FileExists(Path("a.txt")));
    EXPECT_TRUE(FileExists(Path("d.h5")));
  }
  WriteBytes(Path("old.val.h5"), "a stale validation file");
  PackOptions options = Options({"a.txt"}, "d.h5");
  options.force = true;
  options.val_output = Path("old.val.h5");
  ASSERT_TRUE(Pack(options).ok());
  EXPECT_FALSE(FileExists(Path("old.val.h5")));
  EXPECT_TRUE(FileExists(Path("a.txt")));
}

TEST_F(PackTest, DefaultValidationPath) {
  EXPECT_EQ(DefaultValidationPath("data.h5"), "data.val.h5");
  EXPECT_EQ(DefaultValidationPath("/x/y.h5/data"), "/x/y.h5/data.val.h5");
  EXPECT_EQ(DefaultValidationPath("corpus"), "corpus.val.h5");
}

TEST_F(PackTest, CommandLineHelpListsEveryOptionWithItsDefault) {
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunPackCommand({"--help"}), 0);
  std::string help = ::testing::internal::GetCapturedStdout();
  for (const char* expected :
       {"--input", "--output", "--tokenizer", "(=bytes)", "--vocab-size", "(=0)", "--eod-id",
        "(=-1)", "--val-fraction", "--val-output", "--force", "(required)"})
    EXPECT_NE(help.find(expected), std::string::npos) << expected << " in\n" << help;
}

TEST_F(PackTest, CommandLineRunsAndReportsErrors) {
  WriteBytes(Path("a.txt"), "hello world");
  ::testing::internal::CaptureStdout();
  int code = RunPackCommand(
      {"--input", Path("a.txt"), "--output", Path("out.h5"), "--val-fraction", "0.5", "--quiet"});
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("packed 1 document, 12 tokens"), std::string::npos) << out;
  EXPECT_EQ(ReadPackedFile(Path("out.h5")).tokens.size(), 6u);
  EXPECT_EQ(ReadPackedFile(Path("out.val.h5")).tokens.size(), 6u);

  // Bare arguments are inputs; --input may repeat.
  WriteBytes(Path("b.txt"), "!");
  ::testing::internal::CaptureStdout();
  code = RunPackCommand({Path("a.txt"), "--output", Path("two.h5"), "--input", Path("b.txt")});
  ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(code, 0);
  EXPECT_EQ(ReadPackedFile(Path("two.h5")).doc_offsets, (std::vector<uint64_t>{0, 12, 14}));

  ::testing::internal::CaptureStderr();
  code = RunPackCommand({"--input", Path("gone.txt"), "--output", Path("x.h5")});
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 3);
  EXPECT_NE(err.find("error: input file not found (" + Path("gone.txt")), std::string::npos) << err;

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunPackCommand({"--input", Path("a.txt"), "--output", Path("x.h5"), "--bogus"}), 2);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("--help"), std::string::npos);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunPackCommand({"--output", Path("x.h5")}), 2);  // no --input
  ::testing::internal::GetCapturedStderr();

  // An option of another input format would do nothing: refused, naming it.
  for (const std::vector<std::string>& extra :
       std::vector<std::vector<std::string>>{{"--max-length", "-1"},
                                             {"--overlong", "drop"},
                                             {"--chat-template", "chatml"},
                                             {"--input-format", "chat", "--jsonl-key", "body"}}) {
    std::vector<std::string> args = {"--input", Path("a.txt"), "--output", Path("y.h5")};
    args.insert(args.end(), extra.begin(), extra.end());
    ::testing::internal::CaptureStderr();
    EXPECT_EQ(RunPackCommand(args), 2) << extra[0];
    err = ::testing::internal::GetCapturedStderr();
    const std::string flag = extra.size() == 2 ? extra[0] : extra[2];
    EXPECT_NE(err.find("error: " + flag + " (pack) applies to --input-format "), std::string::npos)
        << err;
    EXPECT_FALSE(PathExists(Path("y.h5")));
  }
}

TEST(ProgressTest, QuietFirstThenAtMostOncePerInterval) {
  FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  ProgressReporter progress("pack", 100 << 20, sink, 2.0, 1.0);
  EXPECT_FALSE(progress.UpdateAt(1 << 20, 0.5));
  EXPECT_FALSE(progress.UpdateAt(2 << 20, 1.9));
  EXPECT_TRUE(progress.UpdateAt(3 << 20, 2.1));
  EXPECT_FALSE(progress.UpdateAt(4 << 20, 2.9));
  EXPECT_TRUE(progress.UpdateAt(5 << 20, 3.2));
  std::rewind(sink);
  char line[256] = {0};
  ASSERT_NE(std::fgets(line, sizeof(line), sink), nullptr);
  EXPECT_EQ(std::string(line).rfind("pack: 3.0/100.0 MiB (3.0%)", 0), 0u) << line;
  std::fclose(sink);
  // 1 MiB of 4 MiB in 1 s: 1 MiB/s, 3 s left.
  EXPECT_EQ(ProgressReporter::Describe(1 << 20, 4 << 20, 1.0),
            "1.0/4.0 MiB (25.0%), 1.0 MiB/s, about 3s left");
}

}  // namespace
}  // namespace trainer
