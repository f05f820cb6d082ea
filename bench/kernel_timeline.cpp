// kernel_timeline: a CUPTI injection library that records every kernel and memset of a process
// as it really runs (start and end on the GPU clock, under load, not serialised the way Nsight
// Compute times kernels), and writes them as CSV at exit. Nothing in the program changes:
//
//   export CUDA_INJECTION64_PATH=build-gpu/tests/libkernel_timeline.so KERNEL_TIMELINE_OUT=t.csv
//   (t-%p.csv: a file per process, named by its id: a bench script's trainer and peer runs)
//   build-gpu/src/trainer train ...
//   python3 bench/timeline_summary.py t.csv      # per step: busy time, gaps, kernels by time
//
// CSV columns: kind (kernel|memset|memcpy), start_ns, end_ns, stream, name.
#include <cupti.h>
#include <cxxabi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

namespace {

constexpr size_t kBufferBytes = 16u << 20;
std::mutex g_mutex;
FILE* g_out = nullptr;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

std::string Demangled(const char* name) {
  int status = 0;
  char* plain = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = (status == 0 && plain != nullptr) ? plain : name;
  std::free(plain);
  for (char& c : result)
    if (c == ',') c = ';';  // keep the CSV's columns
  return result;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(g_mutex);
  CUpti_Activity* record = nullptr;
  while (g_out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      std::fprintf(g_out, "kernel,%llu,%llu,%u,%s\n", (unsigned long long)k->start,
                   (unsigned long long)k->end, k->streamId, Demangled(k->name).c_str());
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      std::fprintf(g_out, "memset,%llu,%llu,%u,%llu bytes\n", (unsigned long long)m->start,
                   (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      std::fprintf(g_out, "memcpy,%llu,%llu,%u,%llu bytes\n", (unsigned long long)m->start,
                   (unsigned long long)m->end, m->streamId, (unsigned long long)m->bytes);
    }
  }
  std::free(buffer);
}

void FlushAtExit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_out != nullptr) std::fclose(g_out);
  g_out = nullptr;
}

}  // namespace

// Called by the CUDA driver when CUDA_INJECTION64_PATH names this library.
extern "C" int InitializeInjection(void) {
  const char* given = std::getenv("KERNEL_TIMELINE_OUT");
  std::string path = given != nullptr ? given : "kernel_timeline.csv";
  // "%p": this process's id (one file per process), wherever it appears.
  const std::string pid = std::to_string(getpid());
  for (size_t at = path.find("%p"); at != std::string::npos; at = path.find("%p", at + pid.size()))
    path.replace(at, 2, pid);
  g_out = std::fopen(path.c_str(), "w");
  if (g_out == nullptr) return 0;
  std::fprintf(g_out, "kind,start_ns,end_ns,stream,name\n");
  if (cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS) return 0;
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  std::atexit(FlushAtExit);
  return 1;
}
