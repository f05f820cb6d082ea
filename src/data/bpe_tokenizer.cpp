// GPT-2's byte-level BPE (see bpe_tokenizer.h): the tokenizer files, the merges, the streaming.
#include "data/bpe_tokenizer.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>

#include "common/filesystem.h"
#include "common/log.h"
#include "data/gpt2_pieces.h"

namespace trainer {
namespace {

// GPT-2's files spell each byte as one printable character: the bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF as the code point of the same value, the other 68 bytes, in order, as U+0100...
int Gpt2ByteCodePoint(int byte) {
  static const std::vector<int> table = [] {
    std::vector<int> t(256, -1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int next = 256;
    for (int b = 0; b < 256; ++b) t[b] = printable(b) ? b : next++;
    return t;
  }();
  return table[byte];
}

// The inverse: a code point of GPT-2's byte spelling -> the byte, -1 for other code points.
int Gpt2CodePointByte(uint32_t code_point) {
  static const std::vector<int> table = [] {
    std::vector<int> t(512, -1);
    for (int b = 0; b < 256; ++b) t[Gpt2ByteCodePoint(b)] = b;
    return t;
  }();
  return code_point < table.size() ? table[code_point] : -1;
}

// The bytes a vocabulary or merges entry stands for. Entries that are not spelled in GPT-2's byte
// characters (added tokens) stand for their own UTF-8.
std::string EntryBytes(const std::string& entry) {
  std::string bytes;
  const uint8_t* text = reinterpret_cast<const uint8_t*>(entry.data());
  for (size_t at = 0; at < entry.size();) {
    const Utf8Char c = DecodeUtf8Char(text + at, entry.size() - at);
    const int byte = c.code_point <= 0x10FFFF ? Gpt2CodePointByte(c.code_point) : -1;
    if (byte < 0) return entry;
    bytes.push_back(static_cast<char>(byte));
    at += c.bytes;
  }
  return bytes;
}

bool FileExists(const std::string& path) {
  return IsRegularFile(path);
}

}  // namespace

StatusOr<std::shared_ptr<const BpeVocabulary>> BpeVocabulary::Load(const std::string& dir,
                                                                   const std::string& flag) {
  std::string vocabulary = dir + "/vocab.json", merges = dir + "/merges.txt";
  if (!FileExists(vocabulary) || !FileExists(merges)) {
    vocabulary = dir + "/encoder.json";
    merges = dir + "/vocab.bpe";
  }
  if (!FileExists(vocabulary) || !FileExists(merges))
    return UsageError(StrFormat(
        "no GPT-2 tokenizer files in %s (%s): expected vocab.json and merges.txt (Hugging Face) "
        "or encoder.json and vocab.bpe (OpenAI). Point %s at the folder that holds them",
        dir.c_str(), flag.c_str(), flag.c_str()));
  auto loaded = std::make_shared<BpeVocabulary>();
  loaded->vocabulary_path_ = vocabulary;
  loaded->merges_path_ = merges;
  TRAINER_RETURN_IF_ERROR(loaded->ReadVocabulary(vocabulary));
  TRAINER_RETURN_IF_ERROR(loaded->ReadMerges(merges));
  return std::shared_ptr<const BpeVocabulary>(std::move(loaded));
}

Status BpeVocabulary::ReadVocabulary(const std::string& path) {
  TRAINER_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path));
  const nlohmann::json root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return DataError(
        StrFormat("unreadable tokenizer vocabulary (%s): not JSON. Expected a JSON object "
                  "from each token to its id",
                  path.c_str()));
  if (!root.is_object() || root.empty())
    return DataError(
        StrFormat("unreadable tokenizer vocabulary (%s): not a JSON object of tokens "
                  "to ids",
                  path.c_str()));
  std::vector<std::pair<std::string, int64_t>> entries;
  entries.reserve(root.size());
  for (const auto& [token, value] : root.items()) {
    const int64_t id = value.is_number_integer() ? value.get<int64_t>() : -1;
    if (id < 0)
      return DataError(StrFormat("bad token id in %s: \"%s\" has id '%s'; ids are integers from 0",
                                 path.c_str(), token.c_str(),
                                 value.is_structured() ? value.type_name() : value.dump().c_str()));
    entries.emplace_back(token, id);
  }
  return AddTokens(entries, path, /*allow_repeated_bytes=*/false);
}

Status BpeVocabulary::AddTokens(const std::vector<std::pair<std::string, int64_t>>& entries,
                                const std::string& path, bool allow_repeated_bytes) {
  // Ids run from 0 through about the entry count: at most 2^20 past it (a table is sized by them).
  const int64_t max_id = static_cast<int64_t>(entries.size()) + (int64_t{1} << 20);
  for (const auto& [token, id] : entries) {
    if (id < 0 || id >= max_id)
      return DataError(
          StrFormat("bad token id in %s: \"%s\" has id %lld; ids are integers from 0 "
                    "to a little past the %zu entries",
                    path.c_str(), token.c_str(), static_cast<long long>(id), entries.size()));
    if (static_cast<size_t>(id) >= token_bytes_.size()) token_bytes_.resize(id + 1);
    std::string bytes = EntryBytes(token);
    const bool new_bytes = ids_.emplace(bytes, static_cast<uint32_t>(id)).second;
    if (!token_bytes_[id].empty() || (!new_bytes && !allow_repeated_bytes))
      return DataError(
          StrFormat("duplicate entry in %s: \"%s\" (id %lld) repeats a token or an "
                    "id",
                    path.c_str(), token.c_str(), static_cast<long long>(id)));
    token_bytes_[id] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    const int64_t id = Find(std::string(1, static_cast<char>(b)));
    if (id < 0)
      return DataError(
          StrFormat("incomplete tokenizer vocabulary (%s): no token for the byte "
                    "0x%02X, which byte-level BPE needs for every byte",
                    path.c_str(), b));
    byte_ids_[b] = static_cast<uint32_t>(id);
  }
  return Status::Ok();
}

Status BpeVocabulary::ReadMerges(const std::string& path) {
  TRAINER_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path));
  std::istringstream lines(text);
  std::string line;
  uint32_t rank = 0;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
      return DataError(
          StrFormat("bad merge in %s line %d: '%s'; each line is two tokens "
                    "separated by one space",
                    path.c_str(), number, line.c_str()));
    TRAINER_RETURN_IF_ERROR(AddMerge(line.substr(0, space), line.substr(space + 1), rank++, path,
                                     StrFormat("line %d: '%s'", number, line.c_str())));
  }
  return Status::Ok();
}

Status BpeVocabulary::AddMerge(const std::string& left_entry, const std::string& right_entry,
                               uint32_t rank, const std::string& path, const std::string& where) {
  const std::string left = EntryBytes(left_entry), right = EntryBytes(right_entry);
  const int64_t left_id = Find(left), right_id = Find(right), merged_id = Find(left + right);
  if (left_id < 0 || right_id < 0 || merged_id < 0)
    return DataError(
        StrFormat("merge not in the vocabulary (%s %s): the merge needs both tokens and their "
                  "concatenation in %s. Use the files of one tokenizer",
                  path.c_str(), where.c_str(), vocabulary_path_.c_str()));
  // A repeated pair takes its later rank, as GPT-2's encoder (a dict of the lines) does.
  merges_[PairKey(left_id, right_id)] = Merge{rank, static_cast<uint32_t>(merged_id)};
  return Status::Ok();
}

StatusOr<std::shared_ptr<const BpeVocabulary>> BpeVocabulary::FromEntries(
    const std::vector<std::pair<std::string, int64_t>>& vocabulary,
    const std::vector<std::pair<std::string, std::string>>& merges, const std::string& source) {
  auto built = std::make_shared<BpeVocabulary>();
  built->vocabulary_path_ = built->merges_path_ = source;
  TRAINER_RETURN_IF_ERROR(built->AddTokens(vocabulary, source, /*allow_repeated_bytes=*/true));
  for (size_t i = 0; i < merges.size(); ++i)
    TRAINER_RETURN_IF_ERROR(built->AddMerge(merges[i].first, merges[i].second,
                                            static_cast<uint32_t>(i), source,
                                            StrFormat("merge %zu", i)));
  return std::shared_ptr<const BpeVocabulary>(std::move(built));
}

int64_t BpeVocabulary::Find(const std::string& bytes) const {
  const auto it = ids_.find(bytes);
  return it == ids_.end() ? int64_t{-1} : static_cast<int64_t>(it->second);
}

void BpeVocabulary::EncodePiece(const uint8_t* bytes, size_t size,
                                std::vector<uint32_t>* tokens) const {
  // The symbols as a linked list, and the candidate pairs in a heap by (rank, position): the
  // lowest rank first, the leftmost among equals. A merge only makes pairs of higher ranks (its
  // result exists from its own rank on), so this merges each rank's pairs left to right before
  // the next rank, as GPT-2's encoder does, in O(n log n) for pieces of any length.
  struct Symbol {
    uint32_t id;
    int64_t prev, next;  // -1 at the ends
  };
  struct Candidate {
    uint32_t rank;
    int64_t left;  // the pair's left symbol
    uint32_t merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  const int64_t n = static_cast<int64_t>(size);
  std::vector<Symbol> symbols(size);
  for (int64_t i = 0; i < n; ++i) symbols[i] = {byte_ids_[bytes[i]], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> candidates;
  const auto consider = [&](int64_t left) {
    if (left < 0 || symbols[left].next < 0) return;
    const auto it = merges_.find(PairKey(symbols[left].id, symbols[symbols[left].next].id));
    if (it != merges_.end()) candidates.push({it->second.rank, left, it->second.merged});
  };
  for (int64_t i = 0; i + 1 < n; ++i) consider(i);
  while (!candidates.empty()) {
    const Candidate top = candidates.top();
    candidates.pop();
    Symbol& left = symbols[top.left];
    if (left.id == kMerged || left.next < 0) continue;  // gone, or nothing on its right now
    const auto it = merges_.find(PairKey(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.merged != top.merged) continue;  // the pair changed
    Symbol& right = symbols[left.next];
    left.id = top.merged;
    right.id = kMerged;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.left;
    consider(left.prev);
    consider(top.left);
  }
  for (int64_t i = 0; i >= 0 && i < n; i = symbols[i].next) tokens->push_back(symbols[i].id);
}

Status BpeTokenizer::Encode(const uint8_t* bytes, size_t size, std::vector<uint32_t>* tokens) {
  pending_.append(reinterpret_cast<const char*>(bytes), size);
  EncodePending(/*document_end=*/false, tokens);
  return Status::Ok();
}

Status BpeTokenizer::EndDocument(std::vector<uint32_t>* tokens) {
  EncodePending(/*document_end=*/true, tokens);
  return Status::Ok();
}

std::vector<uint32_t> BpeTokenizer::EncodeText(const std::string& text) {
  std::vector<uint32_t> tokens;
  pending_ = text;
  EncodePending(/*document_end=*/true, &tokens);
  return tokens;
}

void BpeTokenizer::EncodePending(bool document_end, std::vector<uint32_t>* tokens) {
  // Each <|endoftext|> in the text ends the text before it, as transformers' tokenizer splits on
  // its special tokens first.
  size_t start = 0;
  if (end_of_text_id_ >= 0) {
    for (size_t at; (at = pending_.find(kEndOfText, start)) != std::string::npos;
         start = at + kEndOfText.size()) {
      EncodeSegment(start, at, at, tokens);
      tokens->push_back(static_cast<uint32_t>(end_of_text_id_));
    }
  }
  size_t limit = pending_.size();
  if (!document_end) {
    // A <|endoftext|> cut short at the end starts in its last 12 bytes; the pieces that end
    // before the 12 bytes in front of those are final (FinalPiecesLimit).
    const size_t hold = end_of_text_id_ >= 0 ? kEndOfText.size() - 1 : 0;
    const size_t after = pending_.size() - start;
    limit = start + (after > hold ? FinalPiecesLimit(after - hold) : 0);
  }
  pending_.erase(0, EncodeSegment(start, pending_.size(), limit, tokens));
}

size_t BpeTokenizer::EncodeSegment(size_t begin, size_t end, size_t limit,
                                   std::vector<uint32_t>* tokens) {
  constexpr size_t kMaxCached = size_t{1} << 20, kMaxCachedPiece = 256;
  const uint8_t* text = reinterpret_cast<const uint8_t*>(pending_.data()) + begin;
  piece_ends_.clear();
  SplitGpt2Pieces(text, end - begin, &piece_ends_);
  size_t start = 0;
  for (const size_t piece_end : piece_ends_) {
    if (begin + piece_end > limit) break;
    std::string piece(pending_, begin + start, piece_end - start);
    if (piece.size() > kMaxCachedPiece) {  // a long run: encoded, not kept
      vocabulary_->EncodePiece(text + start, piece_end - start, tokens);
      start = piece_end;
      continue;
    }
    auto it = cache_.find(piece);
    if (it == cache_.end()) {
      if (cache_.size() >= kMaxCached) cache_.clear();
      std::vector<uint32_t> encoded;
      vocabulary_->EncodePiece(text + start, piece_end - start, &encoded);
      it = cache_.emplace(std::move(piece), std::move(encoded)).first;
    }
    tokens->insert(tokens->end(), it->second.begin(), it->second.end());
    start = piece_end;
  }
  return begin + start;
}

StatusOr<std::unique_ptr<Tokenizer>> MakeBpeTokenizer(const std::string& dir,
                                                      const std::string& flag, int64_t vocab_size,
                                                      int64_t eod_id) {
  if (dir.empty())
    return UsageError(
        StrFormat("missing %s (pack, --tokenizer gpt2): give the folder with the "
                  "tokenizer's vocab.json and merges.txt (e.g. a Hugging Face gpt2 "
                  "download)",
                  flag.c_str()));
  TRAINER_ASSIGN_OR_RETURN(std::shared_ptr<const BpeVocabulary> vocabulary,
                           BpeVocabulary::Load(dir, flag));
  if (vocab_size != 0 && vocab_size != vocabulary->size())
    return UsageError(
        StrFormat("invalid --vocab-size (pack, --tokenizer gpt2): %lld, but %s has "
                  "%lld tokens. Leave --vocab-size out",
                  static_cast<long long>(vocab_size), vocabulary->vocabulary_path().c_str(),
                  static_cast<long long>(vocabulary->size())));
  if (eod_id == -1) {
    eod_id = vocabulary->Find(BpeTokenizer::kEndOfText);
    if (eod_id < 0)
      return UsageError(
          StrFormat("no <|endoftext|> token in %s (pack, --tokenizer gpt2): give "
                    "the end-of-document id with --eod-id",
                    vocabulary->vocabulary_path().c_str()));
  }
  if (eod_id < 0 || eod_id >= vocabulary->size())
    return UsageError(
        StrFormat("invalid --eod-id (pack, --tokenizer gpt2): %lld is not below the "
                  "vocabulary size %lld",
                  static_cast<long long>(eod_id), static_cast<long long>(vocabulary->size())));
  return std::unique_ptr<Tokenizer>(new BpeTokenizer(std::move(vocabulary), eod_id));
}

}  // namespace trainer
