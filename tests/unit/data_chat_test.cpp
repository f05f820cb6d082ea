// Tests of chat data (`trainer pack --input-format chat`, src/data/chat.h): the chatml, llama3 and
// none renderings with the bytes tokenizer, exact loss-mask positions, truncation and dropping,
// and the /loss_mask dataset read back with the HDF5 C API.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <vector>

#include "common/filesystem.h"
#include "data/chat.h"
#include "data/dataset.h"
#include "data/packer.h"
#include "data/token_file_writer.h"
#include "data/tokenizer.h"
#include "data_test_util.h"

namespace trainer {
namespace {

using testing_data::DataTest;
using testing_data::WriteBytes;

const char* kLine = R"({"id": 7, "messages": [{"role": "user", "content": "hi"}, )"
                    R"({"role": "assistant", "content": "yo\n", "extra": [1, {"a": "]"}]}]})";

// Renders kLine; returns the text (bytes tokenizer: one token per byte) and its mask as '0'/'1'.
void Render(const std::string& chat_template, std::string* text, std::string* mask) {
  std::vector<ChatMessage> messages;
  Status parsed = JsonChatMessages(kLine, &messages);
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  ASSERT_EQ(messages.size(), 2u);
  ByteTokenizer bytes;
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> bits;
  Status status = RenderChat(messages, chat_template, &bytes, "test", &tokens, &bits);
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_EQ(tokens.size(), bits.size());
  text->clear();
  mask->clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    text->push_back(static_cast<char>(tokens[i]));
    mask->push_back(bits[i] ? '1' : '0');
  }
}

// '1' over `trained`, '0' over `other`.
std::string Bits(const std::string& other, const std::string& trained) {
  return std::string(other.size(), '0') + std::string(trained.size(), '1');
}

TEST(ChatTest, ChatmlMasksTheAssistantContentAndEndMarker) {
  std::string text, mask;
  Render("chatml", &text, &mask);
  EXPECT_EQ(text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo\n<|im_end|>\n");
  EXPECT_EQ(
      mask,
      Bits("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", "yo\n<|im_end|>") + "0");
}

TEST(ChatTest, Llama3MasksTheAssistantContentAndEndMarker) {
  std::string text, mask;
  Render("llama3", &text, &mask);
  const std::string before =
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  // Llama 3's template trims each content ("yo\n" -> "yo"); chatml keeps it.
  EXPECT_EQ(text, before + "yo<|eot_id|>");
  EXPECT_EQ(mask, Bits(before, "yo<|eot_id|>"));
}

TEST(ChatTest, NoneTemplateIsTheContentsAndNewlines) {
  std::string text, mask;
  Render("none", &text, &mask);
  EXPECT_EQ(text, "hi\nyo\n\n");
  EXPECT_EQ(mask, "0001111");
}

// OpenAI's "weight": 0 and ms-swift's "loss": false leave an assistant message untrained (mask 0
// over it); 1, true and null train it as without the key.
TEST(ChatTest, WeightAndLossMarkTheAssistantMessagesTrained) {
  std::vector<ChatMessage> messages;
  Status parsed = JsonChatMessages(
      R"({"messages": [{"role": "user", "content": "q"}, )"
      R"({"role": "assistant", "content": "no", "weight": 0}, )"
      R"({"role": "assistant", "content": "ok", "weight": 1}, )"
      R"({"role": "assistant", "content": "NO", "loss": false}, )"
      R"({"role": "assistant", "content": "OK", "loss": true}, )"
      R"({"role": "assistant", "content": "ya", "loss": null, "tool_calls": []}]})",
      &messages);
  ASSERT_TRUE(parsed.ok()) << parsed.message();
  ByteTokenizer bytes;
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> bits;
  Status status = RenderChat(messages, "none", &bytes, "test", &tokens, &bits);
  ASSERT_TRUE(status.ok()) << status.message();
  std::string mask;
  for (uint8_t bit : bits) mask.push_back(bit ? '1' : '0');
  EXPECT_EQ(mask,
            "00"
            "000"
            "111"
            "000"
            "111"
            "111");
  for (const char* bad : {R"("weight": 2)", R"("weight": "0")", R"("loss": 0)"}) {
    const std::string line =
        std::string(R"({"messages": [{"role": "assistant", "content": "x", )") + bad + "}]}";
    parsed = JsonChatMessages(line, &messages);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_NE(parsed.message().find(bad[1] == 'w' ? "use 0 (not trained) or 1" : "use true, false"),
              std::string::npos)
        << parsed.message();
  }
  // Only the assistant's messages train: a user message marked for training is refused.
  ASSERT_TRUE(JsonChatMessages(R"({"messages": [{"role": "user", "content": "q", "weight": 1}]})",
                               &messages)
                  .ok());
  status = RenderChat(messages, "none", &bytes, "test", &tokens, &bits);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("a user message marked for training"), std::string::npos)
      << status.message();
  // Tool calls no template renders would be dropped: refused.
  parsed = JsonChatMessages(R"({"messages": [{"role": "assistant", "content": "", )"
                            R"("tool_calls": [{"type": "function"}]}]})",
                            &messages);
  EXPECT_FALSE(parsed.ok());
  EXPECT_NE(
      parsed.message().find("\"tool_calls\", which the built-in chat templates do not render"),
      std::string::npos)
      << parsed.message();
}

TEST(ChatTest, BadRecordsAndTemplatesAreErrors) {
  std::vector<ChatMessage> messages;
  EXPECT_FALSE(JsonChatMessages(R"({"text": "x"})", &messages).ok());
  EXPECT_FALSE(JsonChatMessages(R"({"messages": [{"role": "user"}]})", &messages).ok());
  EXPECT_FALSE(JsonChatMessages(R"({"messages": [{"role": 1, "content": "x"}]})", &messages).ok());
  EXPECT_FALSE(CheckChatTemplate("vicuna").ok());
}

class ChatPackTest : public DataTest {
 protected:
  // Pack chat.jsonl into d.h5 with `chat_template`, quietly.
  PackOptions ChatOptions(const std::string& chat_template = "none") {
    PackOptions options;
    options.inputs = {Path("chat.jsonl")};
    options.output = Path("d.h5");
    options.input_format = "chat";
    options.chat_template = chat_template;
    options.show_progress = false;
    return options;
  }
};

std::vector<uint8_t> ReadMask(const std::string& path, std::string* format) {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0);
  hid_t set = H5Dopen2(file, "loss_mask", H5P_DEFAULT);
  EXPECT_GE(set, 0);
  hid_t space = H5Dget_space(set);
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space, &n, nullptr);
  std::vector<uint8_t> mask(n);
  if (n) H5Dread(set, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask.data());
  hid_t attr = H5Aopen(set, "format", H5P_DEFAULT);
  EXPECT_GE(attr, 0);
  hid_t type = H5Aget_type(attr);
  char* value = nullptr;
  H5Aread(attr, type, &value);
  *format = value ? value : "";
  H5free_memory(value);
  H5Tclose(type);
  H5Aclose(attr);
  H5Sclose(space);
  H5Dclose(set);
  H5Fclose(file);
  return mask;
}

TEST_F(ChatPackTest, PackWritesTheMaskAndCountsOverlongConversations) {
  // "none": "a\nbb\n" = 5 tokens + eod; the second one is 2 + 9 = 11 + eod.
  WriteBytes(
      Path("chat.jsonl"),
      R"({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "bb"}]})"
      "\n\n"
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "ccccccc"}]})"
      "\n");
  for (const std::string overlong : {"truncate", "drop"}) {
    PackOptions options;
    options.inputs = {Path("chat.jsonl")};
    options.output = Path(overlong + ".h5");
    options.input_format = "chat";
    options.chat_template = "none";
    options.max_length = 8;
    options.overlong = overlong;
    options.chunk_tokens = 4;
    options.show_progress = false;
    PackSummary summary;
    Status status = PackDataset(options, &summary);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_EQ(summary.conversations, 2);
    EXPECT_EQ(summary.documents, overlong == "drop" ? 1 : 2);
    EXPECT_EQ(summary.empty_inputs, 0);
    std::string format;
    std::vector<uint8_t> mask = ReadMask(options.output, &format);
    EXPECT_EQ(format, kLossMaskFormat);
    std::vector<uint8_t> first = {0, 0, 1, 1, 1, 0};  // a \n b b \n eod
    if (overlong == "truncate") {
      EXPECT_EQ(summary.truncated, 1);
      EXPECT_EQ(summary.dropped, 0);
      EXPECT_EQ(summary.trained_tokens, 3 + 5);
      std::vector<uint8_t> second = {0, 0, 1, 1, 1, 1, 1, 0};  // s \n c c c c c eod
      first.insert(first.end(), second.begin(), second.end());
      EXPECT_EQ(mask, first);
      EXPECT_NE(summary.OneLine().find("1 truncated, 0 dropped, 8 trained tokens"),
                std::string::npos)
          << summary.OneLine();
    } else {
      EXPECT_EQ(summary.truncated, 0);
      EXPECT_EQ(summary.dropped, 1);
      EXPECT_EQ(summary.trained_tokens, 3);
      EXPECT_EQ(mask, first);
    }
  }
}

TEST_F(ChatPackTest, BadLinesAndOptionsAreNamed) {
  WriteBytes(Path("chat.jsonl"), R"({"messages": [{"role": "user", "content": "a"}]})"
                                 "\n"
                                 R"({"messages": [{"role": "user"}]})"
                                 "\n");
  PackOptions options = ChatOptions("");
  PackSummary summary;
  // chatml writes markers that the byte tokenizer has no tokens for.
  options.chat_template = "chatml";
  Status status = PackDataset(options, &summary);
  EXPECT_EQ(status.code(), ExitCode::kUsage);
  EXPECT_NE(status.message().find("--chat-template chatml (pack) writes special tokens such as "
                                  "<|im_start|>, and the bytes tokenizer has none"),
            std::string::npos)
      << status.message();
  // Without --chat-template the byte tokenizer takes none: the packing goes on to the data.
  options.chat_template = "";
  status = PackDataset(options, &summary);
  EXPECT_EQ(status.code(), ExitCode::kData);
  EXPECT_NE(status.message().find("chat.jsonl line 2"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("no \"content\""), std::string::npos) << status.message();
  options.overlong = "split";
  EXPECT_EQ(PackDataset(options, &summary).code(), ExitCode::kUsage);
  options.overlong = "drop";
  options.chat_template = "alpaca";
  EXPECT_EQ(PackDataset(options, &summary).code(), ExitCode::kUsage);
  options.chat_template = "none";
  options.max_length = 1;
  EXPECT_EQ(PackDataset(options, &summary).code(), ExitCode::kUsage);
}

// Packs that would train nothing, or that mislabel a message, stop with one line and write no file.
TEST_F(ChatPackTest, UntrainableAndMislabelledConversationsAreRefused) {
  const std::string user = R"({"role": "user", "content": "question"})";
  const std::string reply = R"({"role": "assistant", "content": "an answer"})";
  PackOptions options = ChatOptions();
  PackSummary summary;
  const auto pack_error = [&](const std::string& lines, double val_fraction) {
    WriteBytes(Path("chat.jsonl"), lines);
    options.val_fraction = val_fraction;
    const Status status = PackDataset(options, &summary);
    EXPECT_EQ(status.code(), ExitCode::kData) << status.message();
    EXPECT_FALSE(PathExists(Path("d.h5")));
    EXPECT_FALSE(PathExists(Path("d.val.h5")));
    return status.message();
  };
  // ShareGPT's roles: the reply would be context, never trained.
  std::string message = pack_error(
      "{\"messages\": [" + user + ", " + reply + "]}\n" +
          R"({"messages": [{"role": "human", "content": "q"}, {"role": "gpt", "content": "a"}]})",
      0.0);
  EXPECT_NE(message.find("unknown chat role (" + Path("chat.jsonl") +
                         " line 2, --input-format "
                         "chat): \"human\""),
            std::string::npos)
      << message;
  // No assistant message anywhere (also with a split: the counting pass), and replies that lie
  // beyond --max-length.
  for (const double val_fraction : {0.0, 0.2}) {
    message = pack_error("{\"messages\": [" + user + "]}\n{\"messages\": [" + user + "]}\n",
                         val_fraction);
    EXPECT_NE(message.find("no trained tokens (" + Path("chat.jsonl") +
                           ", --input-format chat): none of the 2 conversations has an "
                           "assistant message with content, and"),
              std::string::npos)
        << message;
  }
  options.max_length = 8;
  message = pack_error("{\"messages\": [" + user + ", " + reply + "]}\n", 0.0);
  EXPECT_NE(message.find("none of the 1 conversation has an assistant message with content "
                         "within --max-length 8"),
            std::string::npos)
      << message;
  // Every conversation dropped for its length.
  options.overlong = "drop";
  for (const double val_fraction : {0.0, 0.2}) {
    message = pack_error(
        "{\"messages\": [" + user + ", " + reply + "]}\n\n{\"messages\": [" + reply + "]}\n",
        val_fraction);
    EXPECT_NE(message.find("nothing packed (" + Path("chat.jsonl") +
                           "): --overlong drop dropped 2 conversations longer than --max-length "
                           "8, and no other held text"),
              std::string::npos)
        << message;
  }
}

// A split whose validation part gets only conversations without replies: refused, naming it (a
// file that train would then refuse on open).
TEST_F(ChatPackTest, ASplitLeavesTrainedTokensOnBothSides) {
  std::string lines;
  const std::string question = R"({"role": "user", "content": "q"})";
  for (int i = 0; i < 20; ++i)
    lines += "{\"messages\": [" + question + R"(, {"role": "assistant", "content": "aa"}]})" + "\n";
  for (int i = 0; i < 3; ++i) lines += "{\"messages\": [" + question + "]}\n";
  WriteBytes(Path("chat.jsonl"), lines);
  PackOptions options = ChatOptions();
  options.val_fraction = 0.05;
  PackSummary summary;
  const Status status = PackDataset(options, &summary);
  EXPECT_EQ(status.code(), ExitCode::kData) << status.message();
  EXPECT_NE(status.message().find("no trained tokens in the validation file (" + Path("d.val.h5") +
                                  ", --val-fraction 0.05)"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(PathExists(Path("d.h5")));
  EXPECT_FALSE(PathExists(Path("d.val.h5")));
  options.val_fraction = 0.5;  // the cut among the replies: both sides train
  EXPECT_TRUE(PackDataset(options, &summary).ok());
}

// A file whose /loss_mask is all 0 (written here directly, as pack refuses to) is refused on
// open where its tokens are scanned; one trained token anywhere lets it open.
TEST_F(ChatPackTest, AFileWithoutATrainedTokenIsRefusedOnOpen) {
  for (const size_t trained_at : {size_t{0}, size_t{37}}) {
    const std::string path = Path("mask" + std::to_string(trained_at) + ".h5");
    auto writer = TokenFileWriter::Create(path, TokenFileInfo{257, 256, "bytes", true}, 16);
    ASSERT_TRUE(writer.ok()) << writer.status().message();
    std::vector<uint32_t> tokens(40, 65);
    std::vector<uint8_t> mask(tokens.size(), 0);
    if (trained_at > 0) mask[trained_at] = 1;
    ASSERT_TRUE((*writer)->Append(tokens.data(), tokens.size(), mask.data()).ok());
    ASSERT_TRUE((*writer)->AddDocumentStart(0).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    DatasetOpenOptions options;
    options.scan_chunk_tokens = 16;  // the mask read in pieces
    auto opened = TokenDataset::Open(path, 257, options);
    if (trained_at > 0) {
      EXPECT_TRUE(opened.ok()) << opened.status().message();
      continue;
    }
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), ExitCode::kData);
    EXPECT_NE(opened.status().message().find("no trained tokens (" + path +
                                             ", /loss_mask): its mask is 0 at every token"),
              std::string::npos)
        << opened.status().message();
    options.scan_tokens = false;  // ranks that do not scan rely on the one that does
    EXPECT_TRUE(TokenDataset::Open(path, 257, options).ok());
  }
}

TEST_F(ChatPackTest, ValidationSplitKeepsTheMaskAligned) {
  std::string lines;
  for (int i = 0; i < 10; ++i)
    lines +=
        R"({"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "aa"}]})"
        "\n";
  WriteBytes(Path("chat.jsonl"), lines);
  PackOptions options = ChatOptions();
  options.val_fraction = 0.2;
  PackSummary summary;
  Status status = PackDataset(options, &summary);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(summary.trained_tokens, 30);
  std::string format;
  std::vector<uint8_t> train = ReadMask(Path("d.h5"), &format);
  std::vector<uint8_t> val = ReadMask(Path("d.val.h5"), &format);
  std::vector<uint8_t> all = train;
  all.insert(all.end(), val.begin(), val.end());
  std::vector<uint8_t> one = {0, 0, 1, 1, 1, 0}, expected;
  for (int i = 0; i < 10; ++i) expected.insert(expected.end(), one.begin(), one.end());
  EXPECT_EQ(all, expected);
  EXPECT_EQ(val.size(), 12u);
}

}  // namespace
}  // namespace trainer
