// Unicode text handling where Hugging Face `tokenizers` sets the rule: NFC (utf8proc) and the
// regex class \s (Unicode White_Space) of a tokenizer.json's Split pattern.
#pragma once

#include <cstddef>
#include <string>

namespace trainer {

// Appends `text` in Unicode's NFC; bytes that are not UTF-8 as they are.
void AppendNfc(const char* text, size_t size, std::string* out);

// `pattern` (a tokenizer.json regex) for PCRE2 with \s and \S as `tokenizers` reads them: the
// Unicode White_Space characters. PCRE2's \s also takes U+180E (MONGOLIAN VOWEL SEPARATOR, no
// longer a space since Unicode 6.3), which would split text where `tokenizers` does not.
std::string WithUnicodeWhiteSpace(const std::string& pattern);

}  // namespace trainer
