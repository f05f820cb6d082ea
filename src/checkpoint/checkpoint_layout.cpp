// Shard holders and HDF5 tensor I/O for checkpoints (checkpoint_layout.h).
#include "checkpoint/checkpoint_layout.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>

#include "io/checksum.h"

namespace trainer {

void InjectedCheckpointDelay(const char* name) {
  const char* v = std::getenv(name);
  if (v != nullptr && std::atoi(v) > 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(v)));
}

const char* StateGroup(int which) {
  static const char* kGroups[kStateCount] = {"/model", "/optim/exp_avg", "/optim/exp_avg_sq"};
  return kGroups[which];
}

int StageOf(const ParameterInfo& p, const ModelConfig& model, const DistributedConfig& dist) {
  if (p.layer < 0) {  // the embeddings live on the first stage, the final norm and head on the last
    const bool last = p.role == ParamRole::kFinalNormWeight ||
                      p.role == ParamRole::kFinalNormBias || p.role == ParamRole::kLmHead;
    return last ? dist.pp_degree - 1 : 0;
  }
  const int layer = p.layer;
  std::vector<int> counts = StageLayerCounts(model.num_layers, dist.pp_degree, dist.pp_layers);
  int end = 0;
  for (int s = 0; s < static_cast<int>(counts.size()); ++s) {
    end += counts[s];
    if (layer < end) return s;
  }
  return dist.pp_degree - 1;
}

std::vector<int> CanonicalHolders(const ParameterInfo& p, const ModelConfig& model,
                                  const DistributedConfig& dist, const Topology& topo) {
  const int stage = StageOf(p, model, dist);
  std::vector<int> ranks;
  if (p.shard == ShardKind::kSplitExperts) {  // TP rank 0, sharding rank 0 of each EP rank
    for (int e = 0; e < topo.ep; ++e) ranks.push_back(topo.RankOf(0, e * topo.sharding, stage));
    return ranks;
  }
  const int tp_count = p.shard == ShardKind::kReplicated ? 1 : topo.tp;
  for (int t = 0; t < tp_count; ++t) ranks.push_back(topo.RankOf(t, 0, stage));
  return ranks;
}

std::vector<hsize_t> CheckpointChunkShape(const std::vector<hsize_t>& dims, hsize_t limit) {
  std::vector<hsize_t> chunk(dims);
  for (hsize_t& c : chunk) c = std::max<hsize_t>(1, c);  // HDF5 takes no empty chunk dimension
  for (size_t i = 0; i < dims.size(); ++i) {
    hsize_t rest = 1;  // the elements of one index of dimension i
    for (size_t j = i + 1; j < dims.size(); ++j) rest *= std::max<hsize_t>(1, dims[j]);
    if (rest <= limit) {
      chunk[i] = std::max<hsize_t>(1, std::min(dims[i], limit / rest));
      break;
    }
    chunk[i] = 1;
  }
  return chunk;
}

Status WriteTensor(hid_t file, const std::string& path, const std::vector<int64_t>& shape,
                   const float* data, const std::function<void()>& after_slab) {
  const int rank = static_cast<int>(shape.size());
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  const std::vector<hsize_t> chunk = CheckpointChunkShape(dims);
  Hdf5Handle space, plist, dataset;
  HDF5_CHECK(space.Reset(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose));
  HDF5_CHECK(plist.Reset(H5Pcreate(H5P_DATASET_CREATE), H5Pclose));
  HDF5_CHECK(H5Pset_chunk(plist.get(), rank, chunk.data()));
  HDF5_CHECK(H5Pset_fletcher32(plist.get()));
  Hdf5Handle lcpl;
  HDF5_CHECK(lcpl.Reset(H5Pcreate(H5P_LINK_CREATE), H5Pclose));
  HDF5_CHECK(H5Pset_create_intermediate_group(lcpl.get(), 1));
  HDF5_CHECK(dataset.Reset(H5Dcreate2(file, path.c_str(), H5T_IEEE_F32LE, space.get(), lcpl.get(),
                                      plist.get(), H5P_DEFAULT),
                           H5Dclose));
  size_t count = 1;
  for (hsize_t d : dims) count *= d;
  // The CRC-32 of a large tensor on a second thread while HDF5 checksums and writes its chunks.
  constexpr size_t kConcurrentChecksum = size_t{1} << 20;  // elements
  std::future<uint32_t> crc =
      std::async(count >= kConcurrentChecksum ? std::launch::async : std::launch::deferred,
                 [data, count] { return TensorChecksum(data, count); });
  // In slabs of whole chunks (~32 MB): HDF5 serves one call at a time, so that a read of the
  // training data (the prefetch thread) waits for one slab of a background save, not a tensor.
  const hsize_t row = count / std::max<hsize_t>(1, dims[0]);
  const hsize_t slab_rows = chunk[0] * std::max<hsize_t>(1, (hsize_t{8} << 20) / (chunk[0] * row));
  herr_t written = 0;
  for (hsize_t first = 0; first < dims[0] && written >= 0; first += slab_rows) {
    std::vector<hsize_t> start(dims.size(), 0), block(dims);
    start[0] = first;
    block[0] = std::min(slab_rows, dims[0] - first);
    Hdf5Handle file_space, mem_space;
    if (file_space.Reset(H5Dget_space(dataset.get()), H5Sclose) < 0 ||
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, block.data(),
                            nullptr) < 0 ||
        mem_space.Reset(H5Screate_simple(rank, block.data(), nullptr), H5Sclose) < 0) {
      written = -1;
      break;
    }
    written = H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(),
                       H5P_DEFAULT, data + first * row);
    if (after_slab) after_slab();
  }
  const uint32_t checksum = crc.get();  // joined before any return
  HDF5_CHECK(written);
  TRAINER_RETURN_IF_ERROR(Hdf5WriteIntAttribute(dataset.get(), kChecksumAttribute, checksum));
  HDF5_CHECK(dataset.Close());
  return Status::Ok();
}

Status DatasetShape(hid_t file, const std::string& path, std::vector<int64_t>* shape) {
  Hdf5Handle dataset, space;
  HDF5_CHECK(dataset.Reset(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose));
  HDF5_CHECK(space.Reset(H5Dget_space(dataset.get()), H5Sclose));
  int rank = H5Sget_simple_extent_ndims(space.get());
  HDF5_CHECK(rank);
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  HDF5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  shape->assign(dims.begin(), dims.end());
  // The storage covers the declared shape (every chunk, compressed or not): a shape grown by
  // damage is refused before a reader sizes a buffer by it.
  uint64_t stored = 0, needed = 0;
  if (!Hdf5StoredWhole(dataset.get(), &stored, &needed))
    return CheckpointError(StrFormat(
        "checkpoint tensor /%s has shape %s and stores %llu of the %llu chunks (or bytes) that "
        "shape takes: the file is damaged",
        path.c_str(), ShapeText(*shape).c_str(), static_cast<unsigned long long>(stored),
        static_cast<unsigned long long>(needed)));
  return Status::Ok();
}

namespace {
// Read the block [start, start+count) (per dimension) into `out` (contiguous).
Status ReadBlock(hid_t dataset, const std::vector<hsize_t>& start,
                 const std::vector<hsize_t>& count, float* out) {
  Hdf5Handle file_space, mem_space;
  HDF5_CHECK(file_space.Reset(H5Dget_space(dataset), H5Sclose));
  HDF5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr,
                                 count.data(), nullptr));
  HDF5_CHECK(mem_space.Reset(
      H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose));
  // HDF5's reason now: the handles' clean-up calls clear its error stack.
  if (H5Dread(dataset, H5T_NATIVE_FLOAT, mem_space.get(), file_space.get(), H5P_DEFAULT, out) < 0)
    return CheckpointError(Hdf5ErrorText());
  return Status::Ok();
}
}  // namespace

Status ReadShard(hid_t file, const std::string& path, const ParameterInfo& p, int tp_rank,
                 int tp_size, float* local) {  // tp_*: the shard's slot (ShardSlotOf)
  Hdf5Handle dataset;
  HDF5_CHECK(dataset.Reset(H5Dopen2(file, path.c_str(), H5P_DEFAULT), H5Dclose));
  std::vector<hsize_t> full(p.full_shape.begin(), p.full_shape.end());
  std::vector<hsize_t> start(full.size(), 0), count(full);
  switch (p.shard) {
    case ShardKind::kReplicated:
      return ReadBlock(dataset.get(), start, count, local);
    case ShardKind::kSplitRows:
    case ShardKind::kSplitExperts:
      count[0] = full[0] / tp_size;
      start[0] = count[0] * tp_rank;
      return ReadBlock(dataset.get(), start, count, local);
    case ShardKind::kSplitCols:
      count[1] = full[1] / tp_size;
      start[1] = count[1] * tp_rank;
      return ReadBlock(dataset.get(), start, count, local);
    case ShardKind::kSplitQkvRows: {
      const hsize_t third = full[0] / 3, rows = third / tp_size;
      const hsize_t row_len = full.size() > 1 ? full[1] : 1;
      count[0] = rows;
      for (hsize_t part = 0; part < 3; ++part) {
        start[0] = part * third + rows * tp_rank;
        TRAINER_RETURN_IF_ERROR(
            ReadBlock(dataset.get(), start, count, local + part * rows * row_len));
      }
      return Status::Ok();
    }
  }
  return Status::Ok();
}

namespace {

struct DatasetList {
  std::vector<std::string> paths;
};

herr_t CollectDataset(hid_t, const char* name, const H5O_info_t* info, void* data) {
  if (info->type == H5O_TYPE_DATASET) static_cast<DatasetList*>(data)->paths.push_back(name);
  return 0;
}

}  // namespace

Status ListTensors(hid_t file_id, const std::string& file, std::vector<std::string>* paths) {
  DatasetList list;
  if (H5Ovisit(file_id, H5_INDEX_NAME, H5_ITER_INC, CollectDataset, &list) < 0)
    return CheckpointError(StrFormat("cannot list the tensors of a checkpoint (%s): %s. %s",
                                     file.c_str(), Hdf5ErrorText().c_str(), kDamagedAdvice));
  *paths = std::move(list.paths);
  return Status::Ok();
}

}  // namespace trainer
