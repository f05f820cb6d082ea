// The documents of a packed micro-batch (Data.packing: documents) as the host sees them before
// the upload: how many there are and how long the longest is. The GPU backend sizes its fused
// attention's variable-length batch from these (the sequence count and the longest sequence fix
// the cuDNN graph), so that it never reads the document starts back from the device.
#pragma once

#include <cstdint>

namespace trainer {

struct DocumentShape {
  int count = 0;    // documents (or pieces of one) over all B samples; 0: not known
  int longest = 0;  // tokens of the longest one in this window
  bool known() const { return count > 0; }
};

// doc_starts (B,T) as Backend::AttentionForward reads them: a document starts at row t of sample
// b where doc_starts[b*T+t] == t (row 0 of every sample starts one).
DocumentShape MeasureDocuments(const int32_t* doc_starts, int B, int T);

// The bucket a fused attention graph is built for, so that few graphs serve every micro-batch:
// count rounded up to a power of two (the extra sequences empty), longest up to a power of two
// of at least 64, at most T.
DocumentShape DocumentBucket(const DocumentShape& documents, int T);

}  // namespace trainer
