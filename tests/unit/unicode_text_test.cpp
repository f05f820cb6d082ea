// Tests of src/data/unicode_text.h against Unicode's own data, written out here: NFC keeps
// U+11A7 after a Hangul LV syllable (utf8proc 2.8 dropped it; Python's unicodedata.normalize
// and `tokenizers` keep it) and still composes everything else; \s and \S of a tokenizer.json
// pattern are Unicode's White_Space (U+180E is not one since Unicode 6.3), inside classes too.
#include "data/unicode_text.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <gtest/gtest.h>
#include <pcre2.h>

namespace trainer {
namespace {

std::string Nfc(const std::string& text) {
  std::string out;
  AppendNfc(text.data(), text.size(), &out);
  return out;
}

TEST(UnicodeTextTest, NfcKeepsJungseongOYaeAfterAnLvSyllable) {
  // U+AC00 (LV) U+11A7: NFC leaves both (U+11A7 is no trailing consonant).
  EXPECT_EQ(Nfc("\xEA\xB0\x80\xE1\x86\xA7"), "\xEA\xB0\x80\xE1\x86\xA7");
  EXPECT_EQ(Nfc("x\xEA\xB0\x80\xE1\x86\xA7y\xE1\x86\xA7"),
            "x\xEA\xB0\x80\xE1\x86\xA7y\xE1\x86\xA7");
  // U+1100 U+1161 U+11A7: L + V compose to U+AC00, U+11A7 stays.
  EXPECT_EQ(Nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA7"), "\xEA\xB0\x80\xE1\x86\xA7");
  // Around it NFC composes as ever: e + U+0301 -> U+00E9; U+AC00 U+11A8 -> U+AC01 (LV + T).
  EXPECT_EQ(Nfc("e\xCC\x81\xE1\x86\xA7"
                "e\xCC\x81"),
            "\xC3\xA9\xE1\x86\xA7\xC3\xA9");
  EXPECT_EQ(Nfc("\xEA\xB0\x80\xE1\x86\xA8\xE1\x86\xA7"), "\xEA\xB0\x81\xE1\x86\xA7");
  EXPECT_EQ(Nfc("plain ascii"), "plain ascii");
}

// Whether the whole of `text` matches `pattern` after WithUnicodeWhiteSpace.
bool Matches(const std::string& pattern, const std::string& text) {
  const std::string compiled = WithUnicodeWhiteSpace(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED | PCRE2_ENDANCHORED,
                                   &error, &offset, nullptr);
  EXPECT_NE(code, nullptr) << compiled;
  if (code == nullptr) return false;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0,
                             data, nullptr);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  return rc >= 0;
}

TEST(UnicodeTextTest, BackslashSIsUnicodeWhiteSpace) {
  const std::string mongolian_vowel_separator = "\xE1\xA0\x8E";  // U+180E, Cf
  // White_Space: tab, LF, VT, FF, CR, space, NEL, NBSP, ogham space, en quad, hair space, line
  // and paragraph separators, narrow NBSP, medium math space, ideographic space.
  for (const char* space : {"\t", "\n", "\v", "\f", "\r", " ", "\xC2\x85", "\xC2\xA0",
                            "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x8A", "\xE2\x80\xA8",
                            "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F", "\xE3\x80\x80"}) {
    EXPECT_TRUE(Matches(R"(\s)", space)) << space;
    EXPECT_FALSE(Matches(R"(\S)", space)) << space;
    EXPECT_FALSE(Matches(R"([^\s\p{L}])", space)) << space;
  }
  for (const std::string& other : {mongolian_vowel_separator, std::string("\xE2\x80\x8B"),  // ZWSP
                                   std::string("a"), std::string("\x1C")}) {
    EXPECT_FALSE(Matches(R"(\s)", other)) << other;
    EXPECT_TRUE(Matches(R"(\S)", other)) << other;
  }
  EXPECT_TRUE(Matches(R"([^\s\p{L}\p{N}]+)", mongolian_vowel_separator + "-"));
  EXPECT_TRUE(Matches(R"(\s+(?!\S)\s\S)", "  x"));  // GPT-2: the last space joins the word
  // Escapes and literal brackets are left as they are.
  EXPECT_EQ(WithUnicodeWhiteSpace(R"(\\s[]\s]\[)"),
            R"(\\s[]\x{9}-\x{D}\x{85}\x{2028}\x{2029}\p{Zs}]\[)");
  EXPECT_TRUE(Matches(R"([]\s]+)", "] ]"));
}

}  // namespace
}  // namespace trainer
