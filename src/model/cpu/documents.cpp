// The CPU twins of cuda/attention_documents.cu (cpu_kernels.h): packed documents as the
// sequences of a variable-length batch, and the attention statistics between the ops' (B,NH,T)
// layout and the packed rows' (B*T,NH).
#include "model/cpu/cpu_kernels.h"

namespace trainer {
namespace cpu {

void document_sequences(int32_t* seq_len, int32_t* first_row, const int32_t* doc_starts, int B,
                        int T, int capacity) {
  const int32_t rows = B * T;
  for (int i = 0; i < capacity; ++i) seq_len[i] = 0;
  for (int i = 0; i <= capacity; ++i) first_row[i] = rows;
  int next = 0;  // the next document's index
  for (int32_t r = 0; r < rows && next < capacity; ++r) {
    const int t = r % T;
    if (doc_starts[r] != t) continue;  // not a document's first row
    int length = 1;
    while (t + length < T && doc_starts[r + length] == t) ++length;
    first_row[next] = r;
    seq_len[next] = length;
    ++next;
  }
}

void transpose_attention_stats(float* by_row, float* by_head, int B, int T, int NH,
                               bool to_rows) {
  for (int b = 0; b < B; ++b)  // (B,NH,T) <-> (B*T,NH)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        float& head = by_head[(static_cast<int64_t>(b) * NH + h) * T + t];
        float& row = by_row[(static_cast<int64_t>(b) * T + t) * NH + h];
        if (to_rows)
          row = head;
        else
          head = row;
      }
}

}  // namespace cpu
}  // namespace trainer
