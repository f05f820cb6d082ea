// Hugging Face byte-level BPE from a tokenizer.json (see hf_tokenizer.h).
#include "data/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "common/filesystem.h"
#include "common/log.h"
#include "data/bpe_tokenizer.h"
#include "data/hf_added_tokens.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/unicode_text.h"

namespace trainer {

// GPT-2's pattern: the ByteLevel pre-tokenizer's with use_regex.
static const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct HfModel {
  std::shared_ptr<const BpeVocabulary> bpe;
  bool ignore_merges = false;
  bool nfc = false;
  pcre2_code* pattern = nullptr;  // null: each segment is one piece
  bool jit = false;               // pattern compiled by the JIT
  // A Digits pre-tokenizer ahead of the pattern (StarCoder, SmolLM2): each digit, or each run of
  // them, is a piece of its own before the pattern splits the text.
  enum class Digits { kNone, kEach, kRuns } digits = Digits::kNone;
  bool byte_level = false;  // a ByteLevel pre-tokenizer: the text is byte-mapped, as the vocab
  HfAddedSet raw_added;           // normalized false: matched in the raw text
  HfAddedSet normalized_added;    // matched in the normalized text between those
  std::unordered_map<uint32_t, std::string> added_content;  // id -> an added token's content
  std::vector<uint32_t> prefix, suffix;  // the post-processor's tokens around each document
  int64_t vocab_size = 0;
  std::unordered_map<std::string, int64_t> token_ids;  // every token string (added and model)

  ~HfModel() {
    if (pattern) pcre2_code_free(pattern);
  }
  int64_t Id(const std::string& token) const {
    const auto it = token_ids.find(token);
    return it == token_ids.end() ? -1 : it->second;
  }
};

namespace {

using nlohmann::json;

Status Unsupported(const std::string& source, const std::string& what) {
  return DataError(
      StrFormat("unsupported tokenizer.json (%s): %s. --tokenizer hf reads byte-level "
                "BPE (GPT-2, Qwen2, Llama-3 style)",
                source.c_str(), what.c_str()));
}

Status ReadNormalizer(const json& normalizer, const std::string& source, HfModel* model) {
  if (normalizer.is_null()) return Status::Ok();
  const std::string type = normalizer.value("type", "");
  if (type == "NFC") {
    model->nfc = true;
    return Status::Ok();
  }
  if (type == "Sequence") {
    for (const json& part : normalizer.at("normalizers"))
      TRAINER_RETURN_IF_ERROR(ReadNormalizer(part, source, model));
    return Status::Ok();
  }
  return Unsupported(source, "normalizer " + type + " (only NFC or none)");
}

Status CompilePattern(const std::string& pattern, bool literal, const std::string& source,
                      HfModel* model) {
  if (model->pattern)
    return Unsupported(source, "more than one splitting pre-tokenizer (Split or ByteLevel regex)");
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  // PCRE2_LITERAL takes no UCP (nothing in a literal needs Unicode properties).
  const uint32_t options =
      PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  const std::string compiled = literal ? pattern : WithUnicodeWhiteSpace(pattern);
  model->pattern = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(),
                                 options, &error, &error_offset, nullptr);
  if (!model->pattern) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return DataError(StrFormat("bad pre-tokenizer pattern in %s at offset %zu: %s (pattern %s)",
                               source.c_str(), static_cast<size_t>(error_offset),
                               reinterpret_cast<const char*>(message), compiled.c_str()));
  }
  // Without JIT (not built for this CPU) pcre2_match gives the same results, slower.
  model->jit = pcre2_jit_compile(model->pattern, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD) == 0;
  return Status::Ok();
}

Status ReadPreTokenizer(const json& pre, const std::string& source, HfModel* model) {
  if (pre.is_null()) return Status::Ok();
  const std::string type = pre.value("type", "");
  if (type == "Sequence") {
    for (const json& part : pre.at("pretokenizers"))
      TRAINER_RETURN_IF_ERROR(ReadPreTokenizer(part, source, model));
    return Status::Ok();
  }
  if (type == "Digits") {
    if (model->pattern || model->byte_level || model->digits != HfModel::Digits::kNone)
      return Unsupported(source,
                         "Digits after a splitting pre-tokenizer, ByteLevel or another "
                         "Digits (only first)");
    model->digits =
        pre.value("individual_digits", false) ? HfModel::Digits::kEach : HfModel::Digits::kRuns;
    return Status::Ok();
  }
  if (type == "ByteLevel") {
    model->byte_level = true;
    if (pre.value("add_prefix_space", false))
      return Unsupported(source, "ByteLevel with add_prefix_space true");
    if (pre.value("use_regex", true)) return CompilePattern(kGpt2Pattern, false, source, model);
    return Status::Ok();
  }
  if (type == "Split") {
    if (pre.value("behavior", "") != "Isolated" || pre.value("invert", false))
      return Unsupported(source, "Split other than behavior Isolated, invert false");
    const json& pattern = pre.at("pattern");
    if (pattern.contains("Regex"))
      return CompilePattern(pattern.at("Regex").get<std::string>(), false, source, model);
    return CompilePattern(pattern.at("String").get<std::string>(), true, source, model);
  }
  return Unsupported(source, "pre_tokenizer " + type);
}

// A special or added token's id from tokenizer.json: an integer from 0, at most 2^20 past the
// BPE vocabulary (a larger one would wrap to another token's id, or size a table by it).
StatusOr<uint32_t> ExtraTokenId(const json& id, const std::string& what, const HfModel& model) {
  const int64_t limit =
      model.bpe ? static_cast<int64_t>(model.bpe->size()) + (int64_t{1} << 20) : int64_t{1} << 20;
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= limit)
    return DataError(
        StrFormat("bad token id in tokenizer.json: %s has id %s; ids are integers "
                  "from 0 to a little past the vocabulary (%lld)",
                  what.c_str(), id.is_structured() ? id.type_name() : id.dump().c_str(),
                  static_cast<long long>(limit)));
  return static_cast<uint32_t>(id.get<int64_t>());
}

// The TemplateProcessing's special tokens around $A, anywhere in a Sequence.
Status ReadPostProcessor(const json& post, const std::string& source, HfModel* model) {
  if (post.is_null()) return Status::Ok();
  const std::string type = post.value("type", "");
  if (type == "Sequence") {
    for (const json& part : post.at("processors"))
      TRAINER_RETURN_IF_ERROR(ReadPostProcessor(part, source, model));
    return Status::Ok();
  }
  if (type == "ByteLevel") return Status::Ok();  // offsets only
  if (type != "TemplateProcessing") return Unsupported(source, "post_processor " + type);
  bool after = false;
  for (const json& item : post.at("single")) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    const std::string name = item.at("SpecialToken").at("id").get<std::string>();
    const json& special = post.at("special_tokens").at(name);
    for (const json& id : special.at("ids")) {
      TRAINER_ASSIGN_OR_RETURN(const uint32_t checked,
                               ExtraTokenId(id, "the post_processor's " + name, *model));
      (after ? model->suffix : model->prefix).push_back(checked);
    }
  }
  return Status::Ok();
}

Status ReadModel(const json& root, const std::string& source, HfModel* model) {
  const json& bpe = root.at("model");
  if (bpe.value("type", "BPE") != "BPE")
    return Unsupported(source, "model " + bpe.value("type", std::string()));
  if (bpe.value("byte_fallback", false))
    return Unsupported(source,
                       "BPE with byte_fallback (SentencePiece style: use --tokenizer "
                       "sentencepiece with its tokenizer.model)");
  // Options that change the pieces' tokens (an empty string or null is none).
  for (const char* option : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (bpe.contains(option) && bpe.at(option).is_string() &&
        !bpe.at(option).get<std::string>().empty())
      return Unsupported(source, std::string("BPE with ") + option + " '" +
                                     bpe.at(option).get<std::string>() + "'");
  if (bpe.contains("dropout") && bpe.at("dropout").is_number() &&
      bpe.at("dropout").get<double>() > 0)
    return Unsupported(source, "BPE with dropout (its encoding is random)");
  model->ignore_merges = bpe.value("ignore_merges", false);
  std::vector<std::pair<std::string, int64_t>> vocabulary;
  vocabulary.reserve(bpe.at("vocab").size());
  for (const auto& [token, id] : bpe.at("vocab").items()) {
    vocabulary.emplace_back(token, id.get<int64_t>());
    model->token_ids.emplace(token, id.get<int64_t>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(bpe.at("merges").size());
  for (const json& merge : bpe.at("merges")) {
    if (merge.is_array() && merge.size() == 2) {
      merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
      continue;
    }
    const std::string line = merge.get<std::string>();
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      return DataError(
          StrFormat("bad merge in %s: '%s'; each is two tokens separated by one "
                    "space, or a pair",
                    source.c_str(), line.c_str()));
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  TRAINER_ASSIGN_OR_RETURN(model->bpe, BpeVocabulary::FromEntries(vocabulary, merges, source));
  model->vocab_size = model->bpe->size();
  return Status::Ok();
}

// After the normalizer: a normalized token is matched by its normalized content. Without the
// flags (a hand-made file) a token is plain, and normalized unless special, as in tokenizers.
Status ReadAddedTokens(const json& added, HfModel* model) {
  if (added.is_null()) return Status::Ok();
  for (const json& token : added) {
    const std::string content = token.at("content").get<std::string>();
    TRAINER_ASSIGN_OR_RETURN(
        const uint32_t id, ExtraTokenId(token.at("id"), "added token \"" + content + "\"", *model));
    HfAddedToken entry{content, id, token.value("single_word", false), token.value("lstrip", false),
                       token.value("rstrip", false)};
    if (entry.content.empty()) continue;
    model->token_ids[entry.content] = entry.id;
    model->added_content[entry.id] = entry.content;
    model->vocab_size = std::max<int64_t>(model->vocab_size, int64_t{entry.id} + 1);
    if (!token.value("normalized", !token.value("special", false))) {
      model->raw_added.Add(std::move(entry));
      continue;
    }
    if (model->nfc) {
      std::string normalized;
      AppendNfc(entry.content.data(), entry.content.size(), &normalized);
      entry.content = std::move(normalized);
    }
    model->normalized_added.Add(std::move(entry));
  }
  model->raw_added.Finish();
  model->normalized_added.Finish();
  return Status::Ok();
}

// Whether NFC leaves the text on either side of text[at] apart: the character there has combining
// class 0 and is never the second of a composition. ASCII, and the letters of the scripts written
// without spaces (CJK ideographs, kana, Hangul syllables), so that their text streams too.
bool NfcStable(const std::string& text, size_t at) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(text.data()) + at;
  if (p[0] < 0x80) return true;
  if ((p[0] & 0xF0) != 0xE0 || text.size() - at < 3) return false;
  const uint32_t c = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3041 && c <= 0x3096) ||
         (c >= 0x30A1 && c <= 0x30FA) || (c >= 0xAC00 && c <= 0xD7A3);
}

}  // namespace

HfTokenizer::HfTokenizer(std::shared_ptr<const HfModel> model, int64_t eod_id)
    : model_(std::move(model)), eod_id_(eod_id) {
  if (model_->pattern) match_data_ = pcre2_match_data_create_from_pattern(model_->pattern, nullptr);
}

HfTokenizer::~HfTokenizer() {
  if (match_data_) pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
}

int64_t HfTokenizer::vocab_size() const {
  return model_->vocab_size;
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(const std::string& text,
                                                             const std::string& source,
                                                             int64_t eod_id,
                                                             const std::string& eos_token) {
  auto model = std::make_shared<HfModel>();
  try {
    const json root = json::parse(text);
    TRAINER_RETURN_IF_ERROR(ReadModel(root, source, model.get()));
    TRAINER_RETURN_IF_ERROR(ReadNormalizer(root.value("normalizer", json()), source, model.get()));
    TRAINER_RETURN_IF_ERROR(ReadAddedTokens(root.value("added_tokens", json()), model.get()));
    TRAINER_RETURN_IF_ERROR(
        ReadPreTokenizer(root.value("pre_tokenizer", json()), source, model.get()));
    if (!model->byte_level)
      return Unsupported(source,
                         "no ByteLevel pre-tokenizer, so its vocabulary is not of byte-mapped "
                         "text as this reader encodes it");
    TRAINER_RETURN_IF_ERROR(
        ReadPostProcessor(root.value("post_processor", json()), source, model.get()));
  } catch (const json::exception& e) {
    return DataError(StrFormat("unreadable tokenizer.json (%s): %s", source.c_str(), e.what()));
  }
  for (const uint32_t id : model->prefix)
    model->vocab_size = std::max<int64_t>(model->vocab_size, int64_t{id} + 1);
  for (const uint32_t id : model->suffix)
    model->vocab_size = std::max<int64_t>(model->vocab_size, int64_t{id} + 1);
  if (eod_id == -1) {
    for (const std::string& name : {std::string("<|endoftext|>"), std::string("<|end_of_text|>"),
                                    eos_token, std::string("</s>")}) {
      if (!name.empty() && (eod_id = model->Id(name)) >= 0) break;
    }
    if (eod_id < 0)
      return UsageError(
          StrFormat("no end-of-document token in %s (pack, --tokenizer hf): it has "
                    "none of <|endoftext|>, <|end_of_text|>, </s> or an eos_token; "
                    "give the id with --eod-id",
                    source.c_str()));
  }
  if (eod_id < 0 || eod_id >= model->vocab_size)
    return UsageError(
        StrFormat("invalid --eod-id (pack, --tokenizer hf): %lld is not below the "
                  "vocabulary size %lld",
                  static_cast<long long>(eod_id), static_cast<long long>(model->vocab_size)));
  // A template that ends documents with the end-of-document token itself adds it once.
  if (model->suffix.size() == 1 && model->suffix[0] == eod_id) model->suffix.clear();
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(model), eod_id));
}

StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& dir,
                                                         const std::string& flag, int64_t eod_id) {
  const std::string path = dir + "/tokenizer.json";
  if (dir.empty() || !PathExists(path))
    return UsageError(
        StrFormat("no tokenizer.json in '%s' (%s, --tokenizer hf): point %s at a "
                  "Hugging Face model folder",
                  dir.c_str(), flag.c_str(), flag.c_str()));
  TRAINER_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path));
  std::string eos_token;
  const std::string config_path = dir + "/tokenizer_config.json";
  if (PathExists(config_path)) {
    TRAINER_ASSIGN_OR_RETURN(const std::string config_text, ReadSmallFile(config_path));
    const json config = json::parse(config_text, nullptr, /*allow_exceptions=*/false);
    if (config.is_object() && config.contains("eos_token")) {
      const json& eos = config["eos_token"];
      if (eos.is_string()) eos_token = eos.get<std::string>();
      if (eos.is_object() && eos.contains("content") && eos["content"].is_string())
        eos_token = eos["content"].get<std::string>();
    }
  }
  return FromJson(text, path, eod_id, eos_token);
}

void HfTokenizer::BeginDocument(const std::string&) {
  raw_.Reset();
  normalized_.Reset();
  document_started_ = false;
}

Status HfTokenizer::Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) {
  if (size == 0) return Status::Ok();
  if (!document_started_) {
    document_started_ = true;
    if (document_markers_)
      tokens->insert(tokens->end(), model_->prefix.begin(), model_->prefix.end());
  }
  raw_.text.append(reinterpret_cast<const char*>(bytes), size);
  Process(/*document_end=*/false, tokens);
  return Status::Ok();
}

Status HfTokenizer::EndDocument(std::vector<uint32_t>* tokens) {
  if (!document_started_) return Status::Ok();
  Process(/*document_end=*/true, tokens);
  if (document_markers_)
    tokens->insert(tokens->end(), model_->suffix.begin(), model_->suffix.end());
  document_started_ = false;
  return Status::Ok();
}

std::vector<uint32_t> HfTokenizer::EncodeText(const std::string& text) {
  std::vector<uint32_t> tokens;
  BeginDocument("");
  (void)Encode(reinterpret_cast<const uint8_t*>(text.data()), text.size(), &tokens);
  (void)EndDocument(&tokens);
  return tokens;
}

std::vector<uint32_t> HfTokenizer::EncodePrompt(const std::string& text) {
  std::vector<uint32_t> tokens;
  BeginDocument("");
  (void)Encode(reinterpret_cast<const uint8_t*>(text.data()), text.size(), &tokens);
  Process(/*document_end=*/true, &tokens);
  document_started_ = false;
  return tokens;
}

int64_t HfTokenizer::TokenId(const std::string& token) const {
  return model_->Id(token);
}

std::string HfTokenizer::Decode(uint32_t id) const {
  const auto added = model_->added_content.find(id);
  if (added != model_->added_content.end()) return added->second;
  return static_cast<int64_t>(id) < model_->bpe->size() ? model_->bpe->TokenBytes(id) : "";
}

void HfTokenizer::Process(bool document_end, std::vector<uint32_t>* tokens) {
  HfAddedSet::Match match{};
  size_t safe = 0;
  while (model_->raw_added.Next(&raw_, document_end, &match, &safe)) {
    AppendNormalized(raw_.text.data() + match.text_begin, match.text_end - match.text_begin);
    SplitNormalized(/*final=*/true, tokens);
    tokens->push_back(match.id);
  }
  const std::string& text = raw_.text;
  if (document_end) {
    AppendNormalized(text.data() + raw_.offset, text.size() - raw_.offset);
    SplitNormalized(/*final=*/true, tokens);
    raw_.Reset();
    return;
  }
  // Normalize up to a character that starts afresh: under NFC one that nothing before it composes
  // with or reorders across (NfcStable), else any character's first byte.
  size_t cut = std::max(raw_.offset, std::min(safe, text.empty() ? 0 : text.size() - 1));
  for (; cut > raw_.offset; --cut) {
    if (model_->nfc ? NfcStable(text, cut) : (static_cast<uint8_t>(text[cut]) & 0xC0) != 0x80)
      break;
  }
  if (cut > raw_.offset) {
    AppendNormalized(text.data() + raw_.offset, cut - raw_.offset);
    SplitNormalized(/*final=*/false, tokens);
    raw_.offset = cut;
  }
  raw_.Drop();
}

void HfTokenizer::AppendNormalized(const char* text, size_t size) {
  if (model_->nfc)
    AppendNfc(text, size, &normalized_.text);
  else
    normalized_.text.append(text, size);
}

void HfTokenizer::SplitNormalized(bool final, std::vector<uint32_t>* tokens) {
  HfAddedSet::Match match{};
  size_t safe = 0;
  while (model_->normalized_added.Next(&normalized_, final, &match, &safe)) {
    PreTokenize(normalized_.text.data() + match.text_begin, match.text_end - match.text_begin,
                /*final=*/true, tokens);
    tokens->push_back(match.id);
  }
  const char* text = normalized_.text.data();
  const size_t offset = normalized_.offset;
  if (final) {
    PreTokenize(text + offset, normalized_.text.size() - offset, /*final=*/true, tokens);
    normalized_.Reset();
    return;
  }
  normalized_.offset += PreTokenize(text + offset, safe - offset, /*final=*/false, tokens);
  normalized_.Drop();
}

namespace {
// Whether `c` is a number as Digits takes it (Rust's char::is_numeric: categories Nd, Nl, No).
bool IsNumeric(utf8proc_int32_t c) {
  const utf8proc_category_t category = utf8proc_category(c);
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}
}  // namespace

size_t HfTokenizer::PreTokenize(const char* text, size_t size, bool final,
                                std::vector<uint32_t>* tokens) {
  if (model_->digits == HfModel::Digits::kNone) return SplitPattern(text, size, final, tokens);
  // Digits first: the text before a digit is complete; each digit (or run) is split on its own.
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text);
  const auto digit_at = [&](size_t at, size_t* length) {
    utf8proc_int32_t c = -1;
    const utf8proc_ssize_t n =
        utf8proc_iterate(bytes + at, static_cast<utf8proc_ssize_t>(size - at), &c);
    *length = n > 0 ? static_cast<size_t>(n) : 1;
    return n > 0 && IsNumeric(c);
  };
  size_t start = 0, at = 0, length = 0;
  while (at < size) {
    if (!digit_at(at, &length)) {
      at += length;
      continue;
    }
    if (at > start) SplitPattern(text + start, at - start, /*final=*/true, tokens);
    size_t end = at + length;
    while (model_->digits == HfModel::Digits::kRuns && end < size && digit_at(end, &length))
      end += length;
    if (end == size && !final && model_->digits == HfModel::Digits::kRuns) return at;
    SplitPattern(text + at, end - at, /*final=*/true, tokens);
    start = at = end;
  }
  return start + SplitPattern(text + start, size - start, final, tokens);
}

size_t HfTokenizer::SplitPattern(const char* text, size_t size, bool final,
                                 std::vector<uint32_t>* tokens) {
  if (size == 0) return 0;
  if (!model_->pattern) {  // the whole text is one piece
    if (!final) return 0;
    EncodePiece(text, size, tokens);
    return size;
  }
  auto* match_data = static_cast<pcre2_match_data*>(match_data_);
  const PCRE2_SPTR subject = reinterpret_cast<PCRE2_SPTR>(text);
  // Isolated: every match is a piece, and so is the text between two matches. Partial matching
  // (not final) stops at the first match that more text could change.
  size_t done = 0, search = 0;
  while (search < size) {
    const uint32_t options = final ? 0 : PCRE2_PARTIAL_HARD;
    int rc = model_->jit ? pcre2_jit_match(model_->pattern, subject, size, search, options,
                                           match_data, nullptr)
                         : PCRE2_ERROR_JIT_BADOPTION;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH && rc != PCRE2_ERROR_PARTIAL)  // e.g. its stack full
      rc = pcre2_match(model_->pattern, subject, size, search, options, match_data, nullptr);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    if (rc == PCRE2_ERROR_PARTIAL) {
      if (ovector[0] > done) EncodePiece(text + done, ovector[0] - done, tokens);
      done = ovector[0];
      break;
    }
    if (rc < 0) {  // no match in the rest
      if (final) {
        EncodePiece(text + done, size - done, tokens);
        done = size;
      }
      break;
    }
    const size_t start = ovector[0], end = ovector[1];
    if (end == start) {  // an empty match: look again one character on
      search = start + 1;
      while (search < size && (static_cast<uint8_t>(text[search]) & 0xC0) == 0x80) ++search;
      continue;
    }
    if (start > done) EncodePiece(text + done, start - done, tokens);
    EncodePiece(text + start, end - start, tokens);
    done = search = end;
  }
  if (final && done < size) EncodePiece(text + done, size - done, tokens);
  return final ? size : done;
}

void HfTokenizer::EncodePiece(const char* piece, size_t size, std::vector<uint32_t>* tokens) {
  constexpr size_t kMaxCached = size_t{1} << 20, kMaxCachedPiece = 256;
  const BpeVocabulary& bpe = *model_->bpe;
  if (size > kMaxCachedPiece) {  // a long run: encoded, not kept
    scratch_.assign(piece, size);
    const int64_t whole = model_->ignore_merges ? bpe.Find(scratch_) : -1;
    if (whole >= 0)
      tokens->push_back(static_cast<uint32_t>(whole));
    else
      bpe.EncodePiece(reinterpret_cast<const uint8_t*>(piece), size, tokens);
    return;
  }
  scratch_.assign(piece, size);
  auto it = cache_.find(scratch_);
  if (it == cache_.end()) {
    if (cache_.size() >= kMaxCached) cache_.clear();
    std::vector<uint32_t> encoded;
    const int64_t whole = model_->ignore_merges ? bpe.Find(scratch_) : -1;
    if (whole >= 0)
      encoded.push_back(static_cast<uint32_t>(whole));
    else
      bpe.EncodePiece(reinterpret_cast<const uint8_t*>(piece), size, &encoded);
    it = cache_.emplace(scratch_, std::move(encoded)).first;
  }
  tokens->insert(tokens->end(), it->second.begin(), it->second.end());
}

StatusOr<std::unique_ptr<Tokenizer>> MakeHfTokenizer(const std::string& dir,
                                                     const std::string& flag, int64_t vocab_size,
                                                     int64_t eod_id) {
  auto loaded = HfTokenizer::Load(dir, flag, eod_id);
  // A folder with a SentencePiece model (Llama-2, TinyLlama) whose tokenizer.json, if any, is not
  // byte-level: the model itself.
  if (!loaded.ok() && !dir.empty() && PathExists(dir + "/tokenizer.model"))
    return MakeSentencePieceTokenizer(dir, flag, vocab_size, eod_id);
  if (!loaded.ok()) return loaded.status();
  std::unique_ptr<HfTokenizer> tokenizer = std::move(loaded.value());
  if (vocab_size != 0 && vocab_size != tokenizer->vocab_size())
    return UsageError(
        StrFormat("invalid --vocab-size (pack, --tokenizer hf): %lld, but %s/"
                  "tokenizer.json has %lld tokens. Leave --vocab-size out",
                  static_cast<long long>(vocab_size), dir.c_str(),
                  static_cast<long long>(tokenizer->vocab_size())));
  return std::unique_ptr<Tokenizer>(std::move(tokenizer));
}

}  // namespace trainer
