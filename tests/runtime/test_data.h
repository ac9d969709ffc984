// Deterministic test inputs and exact references for the collective tests.
//
// Every rank derives its input from (seed, rank, element index) alone, so the expected result of a
// collective can be computed anywhere without exchanging data. Values are small integers chosen
// so that every reduction is exact in every data type (8 ranks at most):
//   sum, average, min, max: signed types and floats draw from {-2..2}, unsigned from {1..3}, so a
//     sum stays within [-16, 24] (exact in int8, uint8, float16 and bfloat16);
//   product: one designated rank per element contributes a value of magnitude <= 3 (or 0), every
//     other rank contributes +-1 (1 for unsigned), so a product stays within [-3, 3].
// bool draws 0 or 1 and reduces as logical or (sum, average, max) and and (min, product).
// Only average needs rounding: integers truncate toward zero (sum / size, like Horovod), floats
// are compared within AverageTolerance().
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/data_type.h"
#include "runtime/reduce/reduce_kernels.h"

namespace korovod::testing {

// splitmix64 finaliser: a cheap, well-mixed hash of one word.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool IsSigned(DataType t);  // int8, int16, int32, int64 and the floats
bool IsFloat(DataType t);

// The value `rank` contributes at element `index` of a reduction with `op` in a world of `size`.
int ReduceInput(uint64_t seed, ReduceOp op, DataType t, int rank, int size, size_t index);

// A value for data-movement collectives (allgather, broadcast, alltoall): distinct enough that a
// misplaced block is noticed, and exactly representable in every type. `source` is the producing
// rank, `stream` distinguishes several blocks of one rank (alltoall destination), `index` the
// element within the block.
int MoveValue(uint64_t seed, int source, int stream, size_t index);

// Writes value v (a small integer) as element i of a typed buffer; reads it back as a double.
void StoreElement(DataType t, void* buf, size_t i, double v);
double LoadElement(DataType t, const void* buf, size_t i);

// Fills `count` elements of `buf` with ReduceInput(seed, op, t, rank, size, first + i).
void FillReduceInput(void* buf, size_t count, DataType t, uint64_t seed, ReduceOp op, int rank,
                     int size, size_t first = 0);
// Fills `count` elements with MoveValue(seed, source, stream, i).
void FillMoveValues(void* buf, size_t count, DataType t, uint64_t seed, int source, int stream);
// Fills a buffer with a byte pattern no collective produces, so untouched output shows.
void FillGarbage(void* buf, size_t bytes);

// What a user expects of a reduction of the inputs above, given prescale/postscale.
struct ReduceSpec {
  uint64_t seed = 0;
  ReduceOp op = ReduceOp::kSum;
  DataType type = DataType::kFloat32;
  int size = 1;  // ranks contributing, in set-rank order 0..size-1 (inputs use the set rank)
  double prescale = 1.0;
  double postscale = 1.0;
};
double ExpectedReduction(const ReduceSpec& spec, size_t index);

// Largest accepted |got - expected| for element `expected` of a reduction: 0 (exact) except for
// average and non-integral scaling in floating types, which allow 2 units of relative rounding of
// the type (2^-10 for float16, 2^-7 for bfloat16, 2^-23 for float32, 2^-52 for float64).
double ReduceTolerance(const ReduceSpec& spec, double expected);

// Compares `count` output elements against ExpectedReduction(spec, first + i). Returns "" when all
// match, otherwise a description of the first mismatches and how many there were.
std::string CheckReduction(const ReduceSpec& spec, const void* out, size_t count, size_t first = 0);
// Compares `count` output elements against MoveValue(seed, source, stream, i).
std::string CheckMoveValues(const void* out, size_t count, DataType t, uint64_t seed, int source,
                            int stream);

// A 64-bit digest of a byte range (for "every rank holds the same bits" checks).
uint64_t Digest(const void* data, size_t bytes);

// Splits `total` elements into `parts` counts. even: as equal as possible (the first total % parts
// get one more). uneven: deliberately lopsided, with zero counts wherever parts > 1 (every third
// part gets nothing) and the remainder on the last non-zero part.
std::vector<size_t> SplitCounts(size_t total, int parts, bool uneven);

// Elements rank `from` sends to rank `to` in the alltoall tests for a per-rank budget of about
// `per_rank` elements; uneven matrices contain zeros for some pairs (never for a self-send).
size_t AlltoallCount(size_t per_rank, int size, int from, int to, bool uneven);

// A heap buffer of `bytes` bytes that is nullptr when bytes == 0 (what a user passes for an empty
// tensor).
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(size_t bytes) : bytes_(bytes), data_(bytes ? new std::byte[bytes] : nullptr) {}
  ~Buffer() { delete[] data_; }
  Buffer(Buffer&& o) noexcept : bytes_(o.bytes_), data_(o.data_) {
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      delete[] data_;
      data_ = o.data_;
      bytes_ = o.bytes_;
      o.data_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_ = 0;
  std::byte* data_ = nullptr;
};

}  // namespace korovod::testing
