// Tests of GPT-2's byte-level BPE (src/data/gpt2_pieces.h, bpe_tokenizer.h) and `trainer pack
// --tokenizer gpt2`: the pieces of GPT-2's pattern and the merges of a small hand-made vocabulary
// against results worked out by hand (the pieces were also checked with the Python regex module's
// run of the pattern), any chunking against the whole text, decoding against the input bytes, and
// the errors. tests/integration/bpe_pack.sh checks a trained vocabulary against an independent
// Python encoder.
#include "data/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "data/gpt2_pieces.h"
#include "data/packer.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::ReadPackedFile;
using testing_data::WriteBytes;

std::vector<std::string> Pieces(const std::string& text) {
  std::vector<size_t> ends;
  SplitGpt2Pieces(reinterpret_cast<const uint8_t*>(text.data()), text.size(), &ends);
  std::vector<std::string> pieces;
  size_t start = 0;
  for (size_t end : ends) pieces.push_back(text.substr(start, end - start)), start = end;
  return pieces;
}

using P = std::vector<std::string>;

TEST(Gpt2PiecesTest, PatternCases) {
  EXPECT_EQ(Pieces("Hello world"), (P{"Hello", " world"}));
  EXPECT_EQ(Pieces("I'm here's"), (P{"I", "'m", " here", "'s"}));
  EXPECT_EQ(Pieces("don't"), (P{"don", "'t"}));
  EXPECT_EQ(Pieces("it's'll've"), (P{"it", "'s", "'ll", "'ve"}));
  EXPECT_EQ(Pieces("they'RE"), (P{"they", "'", "RE"}));  // contractions are lower case only
  EXPECT_EQ(Pieces("''re"), (P{"''", "re"}));
  EXPECT_EQ(Pieces(" 's"), (P{" '", "s"}));
  EXPECT_EQ(Pieces("a  b"), (P{"a", " ", " b"}));
  EXPECT_EQ(Pieces("a\n\nb"), (P{"a", "\n", "\n", "b"}));
  EXPECT_EQ(Pieces("a \n b"), (P{"a", " \n", " b"}));
  EXPECT_EQ(Pieces("\t\tx"), (P{"\t", "\t", "x"}));
  EXPECT_EQ(Pieces("x   "), (P{"x", "   "}));
  EXPECT_EQ(Pieces("  "), (P{"  "}));
  EXPECT_EQ(Pieces("abc123def"), (P{"abc", "123", "def"}));
  EXPECT_EQ(Pieces("  123"), (P{" ", " 123"}));
  EXPECT_EQ(Pieces("hi!!! ?"), (P{"hi", "!!!", " ?"}));
  EXPECT_EQ(Pieces("na\xC3\xAFve caf\xC3\xA9"), (P{"na\xC3\xAFve", " caf\xC3\xA9"}));
  // 日本語 テキスト; x²³ (superscripts are numbers); Ⅻ (a letter-like number)
  EXPECT_EQ(Pieces("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9"
                   "\xE3\x83\x88"),
            (P{"\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
               " \xE3\x83\x86\xE3\x82\xAD\xE3\x82\xB9\xE3\x83\x88"}));
  EXPECT_EQ(Pieces("x\xC2\xB2\xC2\xB3"), (P{"x", "\xC2\xB2\xC2\xB3"}));
  EXPECT_EQ(Pieces("\xE2\x85\xAB"), (P{"\xE2\x85\xAB"}));
  EXPECT_EQ(Pieces("a\xC2\xA0"
                   "b"),
            (P{"a", "\xC2\xA0", "b"}));  // no-break space is a space
  EXPECT_EQ(Pieces("hi \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD"),
            (P{"hi", " \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD"}));  // an emoji and its skin tone
  // Bytes that are not UTF-8 (a stray continuation, a truncated lead, an overlong form) count as
  // one other character each.
  EXPECT_EQ(Pieces("a\xFF\xFE"
                   "b"),
            (P{"a", "\xFF\xFE", "b"}));
  EXPECT_EQ(Pieces("a\x80 \xE2\x82"), (P{"a", "\x80", " \xE2\x82"}));
  EXPECT_EQ(Pieces("\xC0\xAF"
                   "x"),
            (P{"\xC0\xAF", "x"}));
  EXPECT_EQ(Pieces(""), P{});
}

TEST(Gpt2PiecesTest, UnicodeClasses) {
  EXPECT_EQ(ClassOfCodePoint('Q'), CharClass::kLetter);
  EXPECT_EQ(ClassOfCodePoint(0x4E00), CharClass::kLetter);  // CJK
  EXPECT_EQ(ClassOfCodePoint(0x0661), CharClass::kNumber);  // Arabic-Indic one
  EXPECT_EQ(ClassOfCodePoint(0x3000), CharClass::kSpace);   // ideographic space
  EXPECT_EQ(ClassOfCodePoint(0x1C), CharClass::kOther);     // not White_Space
  EXPECT_EQ(ClassOfCodePoint(0x1F600), CharClass::kOther);  // an emoji
  EXPECT_EQ(ClassOfCodePoint(0x10FFFF), CharClass::kOther);
}

// GPT-2's spelling of a byte as a character (its files' convention), written out here as the
// test's own copy of the rule.
uint32_t Spelling(int byte) {
  auto printable = [](int b) {
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  };
  if (printable(byte)) return static_cast<uint32_t>(byte);
  int earlier = 0;
  for (int b = 0; b < byte; ++b) earlier += printable(b) ? 0 : 1;
  return 256 + earlier;
}

// JSON string contents for bytes, every character as a \u escape.
std::string JsonSpelling(const std::string& bytes) {
  std::string out;
  char escape[16];
  for (unsigned char b : bytes) {
    std::snprintf(escape, sizeof(escape), "\\u%04x", Spelling(b));
    out += escape;
  }
  return out;
}

// merges.txt spelling (UTF-8 of the characters).
std::string Utf8Spelling(const std::string& bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    const uint32_t c = Spelling(b);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

// A vocabulary of the 256 bytes (ids 0..255 in byte order), then the merges' results and
// <|endoftext|>.
class BpeTest : public DataTest {
 protected:
  static constexpr uint32_t kEl = 256, kHe = 257, kLl = 258, kAa = 259, kSpaceW = 260,
                            kEndOfText = 261;
  void WriteFiles(const std::string& extra_merge = "", bool with_eod = true) {
    std::string vocab = "{";
    for (int b = 0; b < 256; ++b)
      vocab += "\"" + JsonSpelling(std::string(1, static_cast<char>(b))) +
               "\": " + std::to_string(b) + ", ";
    vocab +=
        "\"el\": 256, \"he\": 257, \"ll\": 258, \"aa\": 259, \"" + JsonSpelling(" w") + "\": 260";
    if (with_eod) vocab += ", \"<|endoftext|>\": 261";
    vocab += "}";
    WriteBytes(Path("vocab.json"), vocab);
    WriteBytes(Path("merges.txt"),
               "#version: 0.2\ne l\nh e\nl l\na a\n" + Utf8Spelling(" ") + " w\n" + extra_merge);
  }
  std::shared_ptr<const BpeVocabulary> Load() {
    auto loaded = BpeVocabulary::Load(dir_.string(), "--tokenizer-dir");
    EXPECT_TRUE(loaded.ok()) << loaded.status().message();
    return loaded.ok() ? loaded.value() : nullptr;
  }
  std::vector<uint32_t> Encode(const std::string& text) {
    BpeTokenizer tokenizer(Load(), kEndOfText);
    return tokenizer.EncodeText(text);
  }
};

using Ids = std::vector<uint32_t>;

TEST_F(BpeTest, MergesByRankFromTheLeft) {
  WriteFiles();
  EXPECT_EQ(Encode("he"), (Ids{kHe}));
  EXPECT_EQ(Encode("hel"), (Ids{'h', kEl}));        // "e l" (rank 0) before "h e" (rank 1)
  EXPECT_EQ(Encode("hell"), (Ids{'h', kEl, 'l'}));  // then no pair has a rank
  EXPECT_EQ(Encode("llhe"), (Ids{kLl, kHe}));
  Ids long_run(500, kAa);  // a piece of 1001 bytes (long pieces are not cached)
  long_run.push_back('a');
  EXPECT_EQ(Encode(std::string(1001, 'a')), long_run);
  EXPECT_EQ(Encode("aaa"), (Ids{kAa, 'a'}));  // non-overlapping, from the left
  EXPECT_EQ(Encode("aaaa"), (Ids{kAa, kAa}));
  EXPECT_EQ(Encode("a w"), (Ids{'a', kSpaceW}));  // the space belongs to the next piece
  EXPECT_EQ(Encode("a x"), (Ids{'a', ' ', 'x'}));
  EXPECT_EQ(Encode("w\n\n"), (Ids{'w', '\n', '\n'}));
  // <|endoftext|> in the text is that token; the text before it ends there ("  " is one piece).
  EXPECT_EQ(Encode("a<|endoftext|> w"), (Ids{'a', kEndOfText, kSpaceW}));
  EXPECT_EQ(Encode("x  <|endoftext|>y"), (Ids{'x', ' ', ' ', kEndOfText, 'y'}));
}

TEST_F(BpeTest, EndOfTextIsPlainTextWithoutTheToken) {
  WriteFiles("", /*with_eod=*/false);
  BpeTokenizer tokenizer(Load(), 5);
  EXPECT_EQ(tokenizer.EncodeText("<|endoftext|>"),
            (Ids{'<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>'}));
}

TEST_F(BpeTest, AnyChunkingGivesTheWholeTextsTokens) {
  WriteFiles();
  const std::vector<std::string> fragments = {"he",
                                              "ll",
                                              "o",
                                              " ",
                                              "  ",
                                              "\n",
                                              "\t",
                                              "'s",
                                              "'re",
                                              "'",
                                              "aa",
                                              "w",
                                              "123",
                                              "!?",
                                              "\xC3\xA9",
                                              "\xE6\x97\xA5",
                                              "\xF0\x9F\x91\x8B",
                                              "\xFF",
                                              "\x80",
                                              "\xE2\x82",
                                              "\xC2\xA0"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text;
    const int parts = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < parts; ++i) text += fragments[rng() % fragments.size()];
    const Ids whole = Encode(text);
    // Decoding gives the bytes back.
    auto vocabulary = Load();
    std::string decoded;
    for (uint32_t id : whole) decoded += vocabulary->TokenBytes(id);
    ASSERT_EQ(decoded, text);
    // Cut into chunks of 1..15 bytes (a character, a contraction, a run or <|endoftext|> cut
    // anywhere).
    BpeTokenizer tokenizer(vocabulary, kEndOfText);
    tokenizer.BeginDocument("chunks");
    Ids chunked;
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min<size_t>(1 + rng() % 15, text.size() - at);
      ASSERT_TRUE(
          tokenizer.Encode(reinterpret_cast<const uint8_t*>(text.data()) + at, n, &chunked).ok());
      at += n;
    }
    ASSERT_TRUE(tokenizer.EndDocument(&chunked).ok());
    ASSERT_EQ(chunked, whole) << "text of " << text.size() << " bytes, trial " << trial;
  }
}

TEST_F(BpeTest, PackWritesTheTokensAndEndOfText) {
  WriteFiles();
  WriteBytes(Path("a.txt"), "hello");
  WriteBytes(Path("b.txt"), "aaa w");
  PackOptions options;
  options.inputs = {Path("a.txt"), Path("b.txt")};
  options.output = Path("data.h5");
  options.tokenizer = "gpt2";
  options.tokenizer_dir = dir_.string();
  options.show_progress = false;
  options.read_chunk_bytes = 2;  // every piece cut by a chunk boundary
  PackSummary summary;
  const Status status = PackDataset(options, &summary);
  ASSERT_TRUE(status.ok()) << status.message();
  const auto contents = ReadPackedFile(Path("data.h5"));
  EXPECT_EQ(contents.tokens, (Ids{'h', kEl, 'l', 'o', kEndOfText, kAa, 'a', kSpaceW, kEndOfText}))
      << "'hello': e l first, which leaves no l l; 'aaa w'";
  EXPECT_EQ(contents.doc_offsets, (std::vector<uint64_t>{0, 5, 9}));
  EXPECT_EQ(contents.vocab_size, 262);
  EXPECT_EQ(contents.eod_id, kEndOfText);
  EXPECT_EQ(contents.tokenizer, "gpt2");
}

TEST_F(BpeTest, OpenAiFileNames) {
  WriteFiles();
  std::filesystem::rename(Path("vocab.json"), Path("encoder.json"));
  std::filesystem::rename(Path("merges.txt"), Path("vocab.bpe"));
  EXPECT_EQ(Encode("hel"), (Ids{'h', kEl}));
}

TEST_F(BpeTest, Errors) {
  // No files, no folder, or a folder for another tokenizer: usage errors naming the flag.
  auto missing = BpeVocabulary::Load(dir_.string(), "--tokenizer-dir");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ExitCode::kUsage);
  EXPECT_NE(missing.status().message().find("--tokenizer-dir"), std::string::npos);
  EXPECT_EQ(MakeTokenizer("gpt2", 0, -1).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("bytes", 0, -1, dir_.string()).status().code(), ExitCode::kUsage);

  WriteFiles();
  EXPECT_TRUE(MakeTokenizer("gpt2", 0, -1, dir_.string()).ok());
  EXPECT_TRUE(MakeTokenizer("gpt2", 262, 5, dir_.string()).ok());
  EXPECT_EQ(MakeTokenizer("gpt2", 50257, -1, dir_.string()).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("gpt2", 0, 262, dir_.string()).status().code(), ExitCode::kUsage);
  WriteFiles("", /*with_eod=*/false);
  EXPECT_EQ(MakeTokenizer("gpt2", 0, -1, dir_.string()).status().code(), ExitCode::kUsage);

  // Broken files: data errors naming the file and the entry.
  const auto expect_data_error = [&](const std::string& what) -> std::string {
    auto loaded = BpeVocabulary::Load(dir_.string(), "--tokenizer-dir");
    EXPECT_FALSE(loaded.ok()) << what;
    if (loaded.ok()) return "";
    EXPECT_EQ(loaded.status().code(), ExitCode::kData) << what;
    return loaded.status().message();
  };
  WriteFiles("x y\n");  // "xy" is not in the vocabulary
  EXPECT_NE(expect_data_error("merge").find("merges.txt line 7"), std::string::npos);
  WriteFiles("a b c\n");
  EXPECT_NE(expect_data_error("three parts").find("'a b c'"), std::string::npos);
  WriteFiles();
  WriteBytes(Path("vocab.json"), "{\"a\": 0}");
  EXPECT_NE(expect_data_error("bytes").find("0x00"), std::string::npos);
  WriteBytes(Path("vocab.json"), "{\"a\": 0, \"b\": 0}");
  EXPECT_NE(expect_data_error("duplicate id").find("duplicate"), std::string::npos);
  WriteBytes(Path("vocab.json"), "[1, 2]");
  expect_data_error("not an object");
  WriteBytes(Path("vocab.json"), "{\"a\": \"x\"}");
  EXPECT_NE(expect_data_error("id").find("bad token id"), std::string::npos);
  // An id far past the entries (a table would be sized by it), and a value nested deeper than a
  // printer's stack: refused by kind, not printed.
  WriteBytes(Path("vocab.json"), "{\"a\": 2147483000}");
  EXPECT_NE(expect_data_error("huge id").find("a little past the 1 entries"), std::string::npos);
  WriteBytes(Path("vocab.json"),
             "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
  EXPECT_NE(expect_data_error("nested").find("has id 'array'"), std::string::npos);
}

}  // namespace
}  // namespace trainer
