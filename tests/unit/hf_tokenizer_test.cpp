// Tests of `trainer pack --tokenizer hf` (src/data/hf_tokenizer.h) with a small hand-made
// tokenizer.json in Qwen2's layout: merges as strings and as pairs, ignore_merges, NFC, added
// tokens (longest first, special or not, with tokenizers' flags), the post-processor's BOS, the
// end-of-document choice, any chunking against the whole text, and the errors.
// tests/integration/hf_tokenizer.sh checks tokenizers trained by Hugging Face's library against its
// own encoder.
#include "data/hf_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "data/chat.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::WriteBytes;
using Ids = std::vector<uint32_t>;

// GPT-2's byte spelling of a byte, as a JSON \u escape.
std::string Spelled(const std::string& bytes) {
  std::string out;
  char escape[16];
  for (unsigned char b : bytes) {
    const auto printable = [](int c) {
      return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    };
    int code = b;
    if (!printable(b)) {
      code = 256;
      for (int c = 0; c < b; ++c) code += printable(c) ? 0 : 1;
    }
    std::snprintf(escape, sizeof(escape), "\\u%04x", code);
    out += escape;
  }
  return out;
}

constexpr uint32_t kHe = 256, kLl = 257, kHell = 258, kHello = 259, kSpaceW = 260, kLo = 261,
                   kEndOfText = 262, kX = 263, kXy = 264, kBos = 265;
// Options::flagged's tokens (with no Options::specials): <m> lstrip (special, matched in the raw
// text), <r> rstrip and <b> both (normalized), "wo" and "Wo" single_word (normalized, raw), "café"
// normalized.
constexpr uint32_t kM = 266, kR = 267, kB = 268, kWo = 269, kWoRaw = 270, kCafe = 271;

const char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+)";

struct Options {
  bool pairs = false, ignore_merges = false, nfc = true, bos = true, eot = true;
  std::string pre_tokenizer;          // empty: Qwen2's Sequence
  std::vector<std::string> specials;  // more special added tokens, ids from 266 on
  bool flagged = false;               // the tokens with flags, ids from 266 on
  bool digit_merges = false;          // "Ġ1" (291) and "12" (290), merged in that order
};

std::string TokenizerJson(const Options& o) {
  std::string vocab;
  for (int b = 0; b < 256; ++b)
    vocab +=
        "\"" + Spelled(std::string(1, static_cast<char>(b))) + "\": " + std::to_string(b) + ",";
  vocab += R"("he": 256, "ll": 257, "hell": 258, "hello": 259, ")" + Spelled(" ") +
           R"(w": 260, "lo": 261)";
  std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {Spelled(" "), "w"}};
  if (o.digit_merges) {
    vocab += R"(, "12": 290, ")" + Spelled(" ") + R"(1": 291)";
    merges.push_back({Spelled(" "), "1"});
    merges.push_back({"1", "2"});
  }
  std::string merge_list;
  for (const auto& [a, b] : merges) {
    if (!merge_list.empty()) merge_list += ",";
    merge_list += o.pairs ? "[\"" + a + "\", \"" + b + "\"]" : "\"" + a + " " + b + "\"";
  }
  // An added token with its flags, as tokenizers saves it.
  const auto token = [](int id, const std::string& content, bool single_word, bool lstrip,
                        bool rstrip, bool normalized, bool special) {
    const auto flag = [](bool on) { return on ? std::string("true") : std::string("false"); };
    return "{\"id\": " + std::to_string(id) + ", \"content\": \"" + content +
           "\", \"single_word\": " + flag(single_word) + ", \"lstrip\": " + flag(lstrip) +
           ", \"rstrip\": " + flag(rstrip) + ", \"normalized\": " + flag(normalized) +
           ", \"special\": " + flag(special) + "}";
  };
  const auto added = [&](int id, const std::string& content, bool special) {
    return token(id, content, false, false, false, !special, special);
  };
  std::string added_tokens =
      added(263, "<x>", false) + "," + added(264, "<x>y", false) + "," + added(265, "<s>", true);
  if (o.eot) added_tokens = added(262, "<|endoftext|>", true) + "," + added_tokens;
  for (size_t i = 0; i < o.specials.size(); ++i)
    added_tokens += "," + added(266 + static_cast<int>(i), o.specials[i], true);
  if (o.flagged) {  // single_word, lstrip, rstrip, normalized, special
    added_tokens += "," + token(kM, "<m>", false, true, false, false, true) + "," +
                    token(kR, "<r>", false, false, true, true, false) + "," +
                    token(kB, "<b>", false, true, true, true, false) + "," +
                    token(kWo, "wo", true, false, false, true, false) + "," +
                    token(kWoRaw, "Wo", true, false, false, false, false) + "," +
                    token(kCafe, "caf\\u00e9", false, false, false, true, false);
  }
  const std::string pre =
      !o.pre_tokenizer.empty()
          ? o.pre_tokenizer
          : std::string(R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern":
            {"Regex": ")") +
                kQwen2Pattern +
                R"("}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel",
            "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})";
  const std::string post =
      o.bos ? R"({"type": "Sequence", "processors": [{"type": "ByteLevel"}, {"type":
              "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
              {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<s>":
              {"id": "<s>", "ids": [265], "tokens": ["<s>"]}}}]})"
            : R"({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false})";
  return "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null, \"added_tokens\": [" +
         added_tokens + "], \"normalizer\": " + (o.nfc ? "{\"type\": \"NFC\"}" : "null") +
         ", \"pre_tokenizer\": " + pre + ", \"post_processor\": " + post +
         ", \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"dropout\": "
         "null, \"unk_token\": null, \"fuse_unk\": false, \"byte_fallback\": false, "
         "\"ignore_merges\": " +
         (o.ignore_merges ? "true" : "false") + ", \"vocab\": {" + vocab + "}, \"merges\": [" +
         merge_list + "]}}";
}

std::unique_ptr<HfTokenizer> Make(const Options& o, int64_t eod_id = -1) {
  auto made = HfTokenizer::FromJson(TokenizerJson(o), "tokenizer.json", eod_id);
  EXPECT_TRUE(made.ok()) << made.status().message();
  if (!made.ok()) return nullptr;
  return std::move(made.value());
}

TEST(HfTokenizerTest, MergesAsStringsOrPairs) {
  for (const bool pairs : {false, true}) {
    Options o;
    o.pairs = pairs;
    auto tokenizer = Make(o);
    ASSERT_NE(tokenizer, nullptr);
    EXPECT_EQ(tokenizer->vocab_size(), 266);
    EXPECT_EQ(tokenizer->eod_id(), kEndOfText);
    EXPECT_EQ(tokenizer->EncodeText("hello world"),
              (Ids{kBos, kHello, kSpaceW, 'o', 'r', 'l', 'd'}));
    EXPECT_EQ(tokenizer->EncodeText("hell lo"), (Ids{kBos, kHell, ' ', 'l', 'o'}));
    EXPECT_EQ(tokenizer->EncodeText(""), Ids{});  // an empty document: no BOS either
  }
}

TEST(HfTokenizerTest, IgnoreMergesTakesWholeVocabularyPieces) {
  Options o;
  o.ignore_merges = true;
  EXPECT_EQ(Make(o)->EncodeText("lo hello"), (Ids{kBos, kLo, ' ', kHello}));
  o.ignore_merges = false;
  EXPECT_EQ(Make(o)->EncodeText("lo hello"), (Ids{kBos, 'l', 'o', ' ', kHello}));
}

TEST(HfTokenizerTest, AddedTokensBeforeTheSplitLongestFirst) {
  auto tokenizer = Make(Options{});
  EXPECT_EQ(tokenizer->EncodeText("a<|endoftext|>b<x>y<x>"),
            (Ids{kBos, 'a', kEndOfText, 'b', kXy, kX}));
  EXPECT_EQ(tokenizer->EncodeText("<|endoftext|"),
            (Ids{kBos, '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|'}));
}

// As tokenizers' AddedVocabulary: the raw text's tokens first, then in each normalized part
// between them the normalized tokens; lstrip and rstrip take the white space beside them, a
// single_word token needs no word character beside it in its part.
TEST(HfTokenizerTest, AddedTokenFlags) {
  Options o;
  o.bos = false;
  o.flagged = true;
  auto tokenizer = Make(o);
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->EncodeText("a \xE3\x80\x80<m>b<r>  c"), (Ids{'a', kM, 'b', kR, 'c'}));
  EXPECT_EQ(tokenizer->EncodeText("wo two"), (Ids{kWo, ' ', 't', 'w', 'o'}));
  // "wo" after the raw token <m> starts its part; <r> (normalized) takes no space before it.
  EXPECT_EQ(tokenizer->EncodeText("<m>wo <r>"), (Ids{kM, kWo, ' ', kR}));
  EXPECT_EQ(tokenizer->EncodeText("cafe\xCC\x81"), (Ids{kCafe}));  // NFC first
}

TEST(HfTokenizerTest, NfcNormalizer) {
  Options o;
  EXPECT_EQ(Make(o)->EncodeText("e\xCC\x81"), (Ids{kBos, 0xC3, 0xA9}));  // e + U+0301 -> é
  o.nfc = false;
  EXPECT_EQ(Make(o)->EncodeText("e\xCC\x81"), (Ids{kBos, 'e', 0xCC, 0x81}));
}

TEST(HfTokenizerTest, PatternPieces) {
  Options o;
  o.bos = false;
  auto tokenizer = Make(o);
  // Qwen2's pattern: digits one by one, a space joins the letters after it, newlines apart.
  EXPECT_EQ(tokenizer->EncodeText("12 he\n\n  x"),
            (Ids{'1', '2', ' ', kHe, '\n', '\n', ' ', ' ', 'x'}));
  // GPT-2's pattern from ByteLevel with use_regex: the space goes with the digits.
  o.pre_tokenizer = R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": true})";
  EXPECT_EQ(Make(o)->EncodeText("12 he"), (Ids{'1', '2', ' ', kHe}));
  // Digits ahead of GPT-2's pattern, each digit or runs, against the pattern alone: the pieces
  // differ, and so do the merges they allow ("Ġ1" before "12").
  o.digit_merges = true;
  EXPECT_EQ(Make(o)->EncodeText("a 12"), (Ids{'a', 291, '2'}));
  for (const bool each : {true, false}) {
    o.pre_tokenizer = std::string(R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", )") +
                      "\"individual_digits\": " + (each ? "true" : "false") +
                      R"(}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]})";
    EXPECT_EQ(Make(o)->EncodeText("a 12"), each ? (Ids{'a', ' ', '1', '2'}) : (Ids{'a', ' ', 290}));
  }
  o.digit_merges = false;
  // A Split with a String pattern (PCRE2_LITERAL): the string is a piece of its own.
  o.pre_tokenizer = R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern":
      {"String": "l"}, "behavior": "Isolated", "invert": false}, {"type": "ByteLevel",
      "add_prefix_space": false, "use_regex": false}]})";
  EXPECT_EQ(Make(o)->EncodeText("hello"), (Ids{kHe, 'l', 'l', 'o'}));
  // Without a ByteLevel step the vocabulary is not of byte-mapped text: refused.
  o.pre_tokenizer = R"({"type": "Split", "pattern": {"String": "l"}, "behavior": "Isolated"})";
  auto refused = HfTokenizer::FromJson(TokenizerJson(o), "tokenizer.json", -1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("no ByteLevel pre-tokenizer"), std::string::npos)
      << refused.status().message();
}

TEST(HfTokenizerTest, AnyChunkingGivesTheWholeTextsTokens) {
  const std::vector<std::string> parts = {
      "hello", " ", "  ", "\n", "\r\n", "\xC3\xA9", "e\xCC\x81", "\xCC\x81", "<x>", "<x>y", "<",
      "<|endoftext|>", "<|end", "\xE6\x97\xA5\xE6\x9C\xAC", "12", "'s", "'S", "!!", " world",
      "\xF0\x9F\x91\x8B", "\t",
      // Hangul jamo L, V, T, a syllable; ka, the voicing
      // mark: NFC composes them
      "\xE1\x84\x80", "\xE1\x85\xA1", "\xE1\x86\xA8", "\xEA\xB0\x80", "\xE3\x81\x8B",
      "\xE3\x82\x99",
      // the flagged tokens, U+3000, a word character
      "<m>", "<r>", "<b>", "wo", "Wo", "caf\xC3\xA9", "cafe", "\xE3\x80\x80", "_",
      // digits: Arabic-Indic, a Roman numeral (Nl), a superscript (No), runs
      "7", "0123", "\xD9\xA3", "\xE2\x85\xAB", "\xC2\xB2"};
  // Digits ahead of GPT-2's pattern (StarCoder, SmolLM2): each digit, or each run, then the rest.
  const auto digits = [](bool each) {
    return std::string(R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", )") +
           "\"individual_digits\": " + (each ? "true" : "false") +
           R"(}, {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true}]})";
  };
  std::mt19937 rng(7);
  for (int round = 0; round < 90; ++round) {
    std::string text;
    for (int i = 0; i < 200; ++i) text += parts[rng() % parts.size()];
    Options o;
    o.flagged = round % 2 == 1;
    if (round >= 60) o.pre_tokenizer = digits(round % 3 != 0);
    o.digit_merges = round >= 60;  // a run cut at a chunk's end would lose its "12"
    auto whole = Make(o);
    const Ids want = whole->EncodeText(text);
    auto chunked = Make(o);
    chunked->BeginDocument("doc");
    Ids got;
    for (size_t at = 0; at < text.size();) {
      const size_t n = round < 2 ? 1 : 1 + rng() % 40;
      const size_t take = std::min(n, text.size() - at);
      ASSERT_TRUE(
          chunked->Encode(reinterpret_cast<const uint8_t*>(text.data()) + at, take, &got).ok());
      at += take;
    }
    ASSERT_TRUE(chunked->EndDocument(&got).ok());
    ASSERT_EQ(got, want) << "round " << round;
  }
}

class HfTokenizerFilesTest : public DataTest {};

TEST_F(HfTokenizerFilesTest, EndOfDocumentAndErrors) {
  EXPECT_EQ(MakeTokenizer("hf", 0, -1, dir_.string()).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("hf", 0, -1, "").status().code(), ExitCode::kUsage);
  WriteBytes(Path("tokenizer.json"), TokenizerJson(Options{}));
  auto made = MakeTokenizer("hf", 0, -1, dir_.string());
  ASSERT_TRUE(made.ok()) << made.status().message();
  EXPECT_EQ(made.value()->name(), "hf");
  EXPECT_EQ(made.value()->eod_id(), kEndOfText);
  EXPECT_EQ(MakeTokenizer("hf", 266, 5, dir_.string()).value()->eod_id(), 5);
  EXPECT_EQ(MakeTokenizer("hf", 100, -1, dir_.string()).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("hf", 0, 266, dir_.string()).status().code(), ExitCode::kUsage);

  // No <|endoftext|>: tokenizer_config.json's eos_token, else --eod-id is needed.
  Options o;
  o.eot = false;
  WriteBytes(Path("tokenizer.json"), TokenizerJson(o));
  EXPECT_EQ(MakeTokenizer("hf", 0, -1, dir_.string()).status().code(), ExitCode::kUsage);
  WriteBytes(Path("tokenizer_config.json"), R"({"eos_token": {"content": "<x>"}})");
  EXPECT_EQ(MakeTokenizer("hf", 0, -1, dir_.string()).value()->eod_id(), kX);

  const auto data_error = [&](const std::string& json) {
    WriteBytes(Path("tokenizer.json"), json);
    auto failed = MakeTokenizer("hf", 0, -1, dir_.string());
    EXPECT_FALSE(failed.ok());
    if (failed.ok()) return std::string();
    EXPECT_EQ(failed.status().code(), ExitCode::kData) << failed.status().message();
    return failed.status().message();
  };
  std::string json = TokenizerJson(Options{});
  json.replace(json.find("\"byte_fallback\": false"), 22, "\"byte_fallback\": true");
  EXPECT_NE(data_error(json).find("sentencepiece"), std::string::npos);
  EXPECT_NE(data_error("{\"model\": ").find("unreadable"), std::string::npos);
  o = Options{};
  o.pre_tokenizer = R"({"type": "Whitespace"})";
  EXPECT_NE(data_error(TokenizerJson(o)).find("Whitespace"), std::string::npos);
  o.pre_tokenizer = R"({"type": "Split", "pattern": {"Regex": "(("}, "behavior": "Isolated"})";
  EXPECT_NE(data_error(TokenizerJson(o)).find("pattern"), std::string::npos);
  // Added-token ids that would wrap to another token's (2^32 + 5 is 5) or size a table by them.
  for (const char* id : {"4294967301", "-1", "2147483000", "\"7\""}) {
    json = TokenizerJson(Options{});
    json.replace(json.find("\"id\": 265"), 9, std::string("\"id\": ") + id);
    EXPECT_NE(data_error(json).find("bad token id in tokenizer.json: added token \"<s>\""),
              std::string::npos)
        << id;
  }
}

TEST_F(HfTokenizerFilesTest, SentencePieceErrors) {
  // No model: usage errors; a model that does not parse: a data error. (hf_tokenizer.sh checks a
  // trained model's ids against the sentencepiece package.)
  EXPECT_EQ(MakeTokenizer("sentencepiece", 0, -1, dir_.string()).status().code(), ExitCode::kUsage);
  EXPECT_EQ(MakeTokenizer("sentencepiece", 0, -1, "").status().code(), ExitCode::kUsage);
  WriteBytes(Path("tokenizer.model"), "not a model");
  EXPECT_EQ(MakeTokenizer("sentencepiece", 0, -1, dir_.string()).status().code(), ExitCode::kData);
  // --tokenizer hf turns to the tokenizer.model when there is no tokenizer.json.
  EXPECT_EQ(MakeTokenizer("hf", 0, -1, dir_.string()).status().code(), ExitCode::kData);
}

}  // namespace
}  // namespace trainer

namespace trainer {
namespace {

// A chat template's pieces get none of the post-processor's tokens (the template writes its own
// markers); the tokenizer has them again afterwards.
TEST(HfTokenizerTest, ChatPiecesHaveNoPostProcessorTokens) {
  auto tokenizer = Make(Options{});
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<ChatMessage> messages = {{"user", "hi"}, {"assistant", "hello"}};
  Ids tokens;
  std::vector<uint8_t> mask;
  Status status = RenderChat(messages, "none", tokenizer.get(), "test", &tokens, &mask);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(tokens, (Ids{'h', 'i', '\n', kHello, '\n'}));
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(tokenizer->EncodeText("hello"), (Ids{kBos, kHello}));
}

// A chat template is packed only with a tokenizer that has each of its markers as one token: a
// marker split into ordinary tokens would be trained as text (a Llama-3 tokenizer.json under the
// default chatml). The tokenizers without special tokens take the "none" template only.
TEST(HfTokenizerTest, ChatTemplateNeedsItsMarkersAsTokens) {
  Options chatml;
  chatml.specials = {"<|im_start|>", "<|im_end|>"};
  auto with_markers = Make(chatml);
  auto without = Make(Options{});
  ASSERT_NE(with_markers, nullptr);
  ASSERT_NE(without, nullptr);
  EXPECT_TRUE(CheckChatTokenizer("chatml", with_markers.get()).ok());
  EXPECT_TRUE(CheckChatTokenizer("none", without.get()).ok());
  for (const std::string& name : {std::string("chatml"), std::string("llama3")}) {
    Status refused =
        CheckChatTokenizer(name, name == "chatml" ? without.get() : with_markers.get());
    EXPECT_EQ(refused.code(), ExitCode::kUsage);
    const std::string marker = name == "chatml" ? "<|im_start|>" : "<|begin_of_text|>";
    EXPECT_NE(refused.message().find("--chat-template " + name +
                                     " (pack): the tokenizer has no "
                                     "token " +
                                     marker + " (it splits into "),
              std::string::npos)
        << refused.message();
  }
  // The check leaves the tokenizer's own document markers on (the BOS of its post-processor).
  EXPECT_EQ(with_markers->EncodeText("hello"), (Ids{kBos, kHello}));
  // Rendered, each marker is that one token.
  Ids tokens;
  std::vector<uint8_t> mask;
  ASSERT_TRUE(
      RenderChat({{"assistant", "hello"}}, "chatml", with_markers.get(), "test", &tokens, &mask)
          .ok());
  EXPECT_EQ(tokens.front(), 266u);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), 267u), 1);
  ByteTokenizer bytes;
  for (const char* name : {"chatml", "llama3"}) {
    Status refused = CheckChatTokenizer(name, &bytes);
    EXPECT_EQ(refused.code(), ExitCode::kUsage);
    EXPECT_NE(refused.message().find("and the bytes tokenizer has none"), std::string::npos)
        << refused.message();
  }
  EXPECT_TRUE(CheckChatTokenizer("none", &bytes).ok());
}

}  // namespace
}  // namespace trainer
