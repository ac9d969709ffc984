// CudaDriverGpu: TrainerGpu over the CUDA driver API (libcuda.so.1), loaded with dlopen at the
// first GPU op, so the op library links no CUDA library and loads on CPU-only TensorFlow. Only
// the header (cuda.h, which TensorFlow's wheel ships) is needed to build it.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "sidecar/tensorflow/trainer_gpu.h"

namespace korovod::tf {

class CudaDriverGpu final : public TrainerGpu {
 public:
  // The process's instance, or null with *err naming what is missing (the driver library or
  // one of its entry points, or cuInit's error).
  static CudaDriverGpu* Get(std::string* err);

  std::string Export(const void* data, unsigned char uuid[16],
                     KorovodDeviceBuffer* buffer) override;
  std::string CopyAsync(void* dst, const void* src, uint64_t bytes, void* stream) override;
  std::string RecordEvent(const void* data, void* stream, unsigned char handle[64],
                          void** event) override;
  void DestroyEvent(const void* data, void* event) override;

  struct Driver;  // the entry points
  ~CudaDriverGpu() override;

 private:
  explicit CudaDriverGpu(std::unique_ptr<Driver> driver);
  std::unique_ptr<Driver> driver_;
};

}  // namespace korovod::tf
