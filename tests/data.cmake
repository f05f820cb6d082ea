# Data layer tests (src/data, `trainer pack`): packing, the dataset reader, the sample order.
trainer_gtest(data_test
  SOURCES unit/data_test.cpp unit/data_documents_test.cpp unit/data_pack_test.cpp unit/data_sampler_test.cpp
          unit/bpe_tokenizer_test.cpp unit/hf_tokenizer_test.cpp unit/json_line_test.cpp
          unit/data_chat_test.cpp unit/data_foreign_file_test.cpp unit/unicode_text_test.cpp
          ${trainer_SOURCE_DIR}/src/cli/pack_command.cpp
  LIBS trainer_data Boost::program_options
  TIMEOUT 120)

# Its own process: it measures the peak RSS growth of one pack.
trainer_gtest(data_pack_memory_test
  SOURCES unit/data_pack_memory_test.cpp
  LIBS trainer_data
  TIMEOUT 120)
