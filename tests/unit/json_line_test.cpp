// Tests of JsonStringField (src/data/json_line.h), the JSON Lines reader of `trainer pack
// --input-format jsonl`, and of packing JSON Lines: decoded strings against their expected bytes
// (written out by hand, escapes as Python's json module writes them), the keys skipped, the
// errors, and the packed tokens and documents of a small file.
#include "data/json_line.h"

#include <gtest/gtest.h>

#include "data/chat.h"
#include "data/packer.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::ReadPackedFile;
using testing_data::WriteBytes;

std::string Field(const std::string& line, const std::string& key = "text") {
  std::string text;
  const Status status = JsonStringField(line, key, &text);
  return status.ok() ? text : "ERROR: " + status.message();
}

TEST(JsonLineTest, DecodesTheStringOfTheKey) {
  EXPECT_EQ(Field(R"({"text": "hello"})"), "hello");
  EXPECT_EQ(Field(R"(  {  "id" : 7 , "text":"a b"}  )"), "a b");
  EXPECT_EQ(Field(R"({"text": "q\"b\\s\/n\nt\tr\rf\fb\b"})"), "q\"b\\s/n\nt\tr\rf\fb\b");
  EXPECT_EQ(Field(R"({"text": "caf\u00e9 \u65e5"})"), "caf\xC3\xA9 \xE6\x97\xA5");
  EXPECT_EQ(Field(R"({"text": "\ud83d\ude00!"})"), "\xF0\x9F\x98\x80!");  // a surrogate pair
  EXPECT_EQ(Field(R"({"text": "x\ud83dy"})"), "x\xEF\xBF\xBDy");          // a lone half: U+FFFD
  EXPECT_EQ(Field(R"({"text": "\ude00\ud83d\u0041"})"),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(Field("{\"text\": \"raw \xC3\xA9 bytes\"}"), "raw \xC3\xA9 bytes");
  EXPECT_EQ(Field(R"({"text": ""})"), "");
  // Other values are skipped, however nested, strings inside them included.
  EXPECT_EQ(Field(R"({"meta": {"text": "inner", "a": [1, "}", {"b": "\""}]}, "n": -1.5e3,)"
                  R"( "t": true, "f": false, "z": null, "text": "outer"})"),
            "outer");
  EXPECT_EQ(Field(R"({"content": "c", "text": "t"})", "content"), "c");
  EXPECT_EQ(Field(R"({"text": "first", "text": "last"})"), "last");  // as Python's json.loads
}

TEST(JsonLineTest, Errors) {
  EXPECT_EQ(Field(R"(["text", "x"])"), "ERROR: not a JSON object");
  EXPECT_EQ(Field(R"({"id": 1})"), "ERROR: no \"text\" in the object");
  EXPECT_EQ(Field("{}"), "ERROR: no \"text\" in the object");
  EXPECT_EQ(Field(R"({"text": 5})"), "ERROR: \"text\" is not a string");
  EXPECT_EQ(Field(R"({"text": null})"), "ERROR: \"text\" is not a string");
  EXPECT_EQ(Field(R"({"text": "open)"), "ERROR: an unterminated string");
  EXPECT_EQ(Field(R"({"text": "\x"})"), "ERROR: a bad escape '\\x' in a string");
  EXPECT_EQ(Field(R"({"text": "\u12"})"), "ERROR: a broken \\u escape");
  EXPECT_EQ(Field(R"({"a" 1, "text": "x"})"), "ERROR: no ':' after \"a\"");
  EXPECT_EQ(Field(R"({"a": 1 "text": "x"})"), "ERROR: a missing ',' or '}'");
  EXPECT_EQ(Field(R"({"a": [1, {"b": "]"}, "text: x")"), "ERROR: an unterminated object or array");
  EXPECT_EQ(Field(R"({"a": [1, {"b": 2]}, "text": "x"})"), "ERROR: a stray ']'");
  EXPECT_EQ(Field(R"({"a": {"b": 1, "text": "x"})"), "ERROR: a missing ',' or '}'");
  // One object a line: what follows it is refused, as json.loads refuses "Extra data" (it was
  // dropped: a second object on the line lost its document).
  const std::string extra =
      "ERROR: more after the object's closing '}' (JSON Lines: one object on each line)";
  EXPECT_EQ(Field(R"({"text": "first"}{"text": "second"})"), extra);
  EXPECT_EQ(Field(R"({"text": "third"} junk)"), extra);
  EXPECT_EQ(Field("{\"text\": \"ok\"} \t\r"), "ok");
  std::vector<ChatMessage> messages;
  const Status chat = JsonChatMessages(
      R"({"messages": [{"role": "user", "content": "q"}]}{"messages": []})", &messages);
  EXPECT_EQ(chat.message(), extra.substr(7));
}

class JsonLinesPackTest : public DataTest {};

TEST_F(JsonLinesPackTest, EachLineIsADocument) {
  // A blank line is skipped; an empty text is an empty document (skipped, no eod); the last line
  // has no newline.
  WriteBytes(Path("a.jsonl"),
             "{\"text\": \"ab\"}\n\n{\"text\": \"\"}\r\n{\"id\": 2, \"text\": \"\\u00e9\"}");
  WriteBytes(Path("b.txt"), "cd");
  PackOptions options;
  options.inputs = {Path("a.jsonl")};
  options.output = Path("data.h5");
  options.input_format = "jsonl";
  options.show_progress = false;
  options.read_chunk_bytes = 5;  // lines cut by chunk boundaries
  PackSummary summary;
  Status status = PackDataset(options, &summary);
  ASSERT_TRUE(status.ok()) << status.message();
  const auto contents = ReadPackedFile(Path("data.h5"));
  EXPECT_EQ(contents.tokens, (std::vector<uint32_t>{'a', 'b', 256, 0xC3, 0xA9, 256}));
  EXPECT_EQ(contents.doc_offsets, (std::vector<uint64_t>{0, 3, 6}));
  EXPECT_EQ(summary.empty_inputs, 1);

  // With a validation split (documents are lines, so the cut falls between them).
  options.val_fraction = 0.4;
  options.force = true;  // over the file above
  status = PackDataset(options, &summary);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(ReadPackedFile(Path("data.h5")).tokens, (std::vector<uint32_t>{'a', 'b', 256}));
  EXPECT_EQ(ReadPackedFile(Path("data.val.h5")).tokens, (std::vector<uint32_t>{0xC3, 0xA9, 256}));

  // Errors: a bad line names the file and the line (data, exit 3); token files are not text.
  WriteBytes(Path("bad.jsonl"), "{\"text\": \"ok\"}\n{\"txt\": \"no\"}\n");
  options.inputs = {Path("bad.jsonl")};
  options.val_fraction = 0;
  status = PackDataset(options, &summary);
  EXPECT_EQ(status.code(), ExitCode::kData);
  EXPECT_NE(status.message().find("bad.jsonl line 2"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("no \"text\""), std::string::npos) << status.message();
  options.tokenizer = "u16";
  options.vocab_size = 300;
  EXPECT_EQ(PackDataset(options, &summary).code(), ExitCode::kUsage);
  options.tokenizer = "bytes";
  options.vocab_size = 0;
  options.input_format = "csv";
  EXPECT_EQ(PackDataset(options, &summary).code(), ExitCode::kUsage);
}

}  // namespace
}  // namespace trainer
