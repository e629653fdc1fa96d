// The GPU path against the CPU spec (a build with the GPU path; skipped with a message where no GPU is
// visible): the CUDA compression kernels give the CPU kernels' bytes, the nccl backend gives
// MPI's results for the plain and the compressed allreduce, and training on the GPU follows the
// CPU run and checkpoints to a file the CPU resumes, and the step makes the host wait for the
// device nowhere inside forward/backward and the optimizer step. Run under mpiexec -n 1 or -n 2.
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <cstring>

#include "../support/training.hpp"
#include "gridtrain/app/sync_check.hpp"
#include "gridtrain/comm/device_comm.hpp"
#include "gridtrain/parallel/compressed_allreduce.hpp"

using namespace gridtrain;

namespace {

const torch::Device kGpu(torch::kCUDA);

torch::Tensor random_host(std::int64_t n, std::uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn({n});
}

torch::Tensor bytes_of(const Compressor& c, const torch::Tensor& x, torch::Tensor residual) {
  auto out = torch::empty({static_cast<std::int64_t>(c.compressed_bytes(x.numel()))},
                          x.options().dtype(torch::kUInt8));
  c.compress(x.data_ptr<float>(), x.numel(), residual.defined() ? residual.data_ptr<float>() : nullptr,
             out.data_ptr<std::uint8_t>());
  return out;
}

// An axis over a duplicate of world, on the nccl backend.
std::unique_ptr<Axis> nccl_axis() {
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  auto axis = std::make_unique<Axis>("dp", dup, 60.0);
  axis->attach(make_nccl_comm(axis->comm(), axis->name()));
  return axis;
}

}  // namespace

TEST_CASE("CUDA fp16/bf16 kernels write the CPU kernels' bytes", "[gpu]") {
  select_cuda_device(MPI_COMM_WORLD);
  const auto x = random_host(10007, 1);
  for (auto kind : {CompressorKind::Fp16, CompressorKind::Bf16}) {
    auto cpu = make_compressor(kind, Memory::Host), gpu = make_compressor(kind, Memory::Cuda);
    CAPTURE(cpu->name());
    const auto want = bytes_of(*cpu, x, {});
    const auto got = bytes_of(*gpu, x.to(kGpu), {}).cpu();
    CHECK(torch::equal(got, want));
    auto back = torch::empty_like(x).to(kGpu);
    gpu->decompress(got.to(kGpu).data_ptr<std::uint8_t>(), x.numel(), back.data_ptr<float>());
    auto back_cpu = torch::empty_like(x);
    cpu->decompress(want.data_ptr<std::uint8_t>(), x.numel(), back_cpu.data_ptr<float>());
    CHECK(torch::equal(back.cpu(), back_cpu));
  }
}

TEST_CASE("CUDA onebit kernel: same signs, scale and residual as the CPU kernel", "[gpu]") {
  select_cuda_device(MPI_COMM_WORLD);
  const std::int64_t n = 100003;  // not a multiple of 8
  const auto x = random_host(n, 2);
  auto cpu = make_compressor(CompressorKind::OneBit, Memory::Host);
  auto gpu = make_compressor(CompressorKind::OneBit, Memory::Cuda);
  auto r_cpu = random_host(n, 3) * 0.1, r_gpu = r_cpu.to(kGpu);
  for (int round = 0; round < 3; ++round) {
    const auto want = bytes_of(*cpu, x, r_cpu);
    const auto got = bytes_of(*gpu, x.to(kGpu), r_gpu).cpu();
    CHECK(torch::equal(got.slice(0, 4), want.slice(0, 4)));  // sign bits
    float s_cpu, s_gpu;  // fp64 sums in another order: the scale may differ in its last bit
    std::memcpy(&s_cpu, want.data_ptr<std::uint8_t>(), 4);
    std::memcpy(&s_gpu, got.data_ptr<std::uint8_t>(), 4);
    CHECK(s_gpu == Approx(s_cpu).epsilon(1e-6));
    CHECK(torch::allclose(r_gpu.cpu(), r_cpu, 1e-5, 1e-6));
  }
}

TEST_CASE("nccl backend: allreduce and the compressed allreduce give MPI's results", "[gpu]") {
  select_cuda_device(MPI_COMM_WORLD);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto axis = nccl_axis();
  REQUIRE(std::string(axis->backend()) == "nccl");

  // Integers: the sum is exact in any order, so NCCL and MPI must agree bit for bit.
  const std::int64_t n = (1 << 20) + 3;
  auto host = torch::randint(-1000, 1000, {n}, torch::kFloat32);
  auto dev = host.to(kGpu);
  axis->allreduce_sum(dev.data_ptr<float>(), n, "test").wait();
  MPI_Allreduce(MPI_IN_PLACE, host.data_ptr<float>(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(torch::equal(dev.cpu(), host));

  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  Axis mpi("dp", dup, 60.0);
  for (auto kind : {CompressorKind::Fp16, CompressorKind::Bf16, CompressorKind::OneBit}) {
    const auto x = random_host(4099, 10 + rank);
    auto on_host = x.clone(), on_gpu = x.to(kGpu);
    FeedbackState fh, fg;
    const auto cpu = make_compressor(kind, Memory::Host);
    CAPTURE(cpu->name());
    const auto bh = compressed_allreduce_mean(mpi, *cpu, on_host, fh, "host");
    const auto bg = compressed_allreduce_mean(*axis, *make_compressor(kind, Memory::Cuda), on_gpu, fg, "device");
    CHECK(bh == bg);
    CHECK(torch::allclose(on_gpu.cpu(), on_host, 1e-5, 1e-6));
  }
}

TEST_CASE("nccl backend: 2-byte sums (bf16, fp16) equal the MPI backend's, which round each pair once", "[gpu]") {
  select_cuda_device(MPI_COMM_WORLD);
  auto axis = nccl_axis();
  MPI_Comm dup;
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  Axis mpi("dp", dup, 60.0);
  for (auto [dtype, element] : {std::pair{torch::kBFloat16, Element::BF16}, std::pair{torch::kHalf, Element::F16}}) {
    CAPTURE(c10::toString(dtype));
    const auto x = random_host(4099, 20 + mpi.rank()).to(dtype);
    auto on_host = x.clone(), on_gpu = x.to(kGpu);
    mpi.allreduce_sum(on_host.data_ptr(), 4099, element, "host").wait();
    axis->allreduce_sum(on_gpu.data_ptr(), 4099, element, "device").wait();
    if (mpi.size() <= 2) CHECK(torch::equal(on_gpu.cpu(), on_host));  // one rounding: the same in any order
    else CHECK(torch::allclose(on_gpu.cpu().to(torch::kFloat), on_host.to(torch::kFloat), 2e-2, 1e-3));
  }
}

TEST_CASE("2-byte weights (bf16; fp16 with dynamic loss scaling) train on the GPU as fp32 weights do, within their "
          "rounding", "[gpu]") {
  const auto dir = test::shared_dir("gpu-weights");
  auto config = [&](PrecisionType weights) {
    Config c = test::tiny(dir, 6, 4);
    c.train.device = DeviceKind::Cuda;
    c.precision.type = weights == PrecisionType::Fp32 ? PrecisionType::Bf16 : weights;
    c.precision.weights = weights;
    c.precision.init_scale = 1024;  // fp16: no overflow, so no skipped step, in the first steps
    c.optim.zero_stage = 1;
    return c;
  };
  const auto want = test::quiet_run(config(PrecisionType::Fp32));
  for (auto weights : {PrecisionType::Bf16, PrecisionType::Fp16}) {
    CAPTURE(name_of(weights));
    const auto got = test::quiet_run(config(weights));
    REQUIRE(got.losses.size() == want.losses.size());
    for (std::size_t s = 0; s < want.losses.size(); ++s) CHECK(got.losses[s] == Approx(want.losses[s]).epsilon(2e-2));
  }
}

TEST_CASE("training on the GPU follows the CPU run, and its checkpoint resumes on the CPU", "[gpu]") {
  const auto dir = test::shared_dir("gpu-train");
  auto config = [&](DeviceKind device, int steps) {
    Config c = test::tiny(dir, steps, 4);
    c.train.device = device;
    return c;
  };
  const auto cpu = test::quiet_run(config(DeviceKind::Cpu, 6));
  Config gpu_cfg = config(DeviceKind::Cuda, 3);
  gpu_cfg.checkpoint.dir = dir + "/ckpt";
  const auto gpu = test::quiet_run(gpu_cfg);
  REQUIRE(cpu.losses.size() == 6);
  REQUIRE(gpu.losses.size() == 3);
  for (int s = 0; s < 3; ++s) CHECK(gpu.losses[s] == Approx(cpu.losses[s]).epsilon(1e-4));  // other kernels
  const auto rest = test::quiet_run(test::resuming(config(DeviceKind::Cpu, 6), gpu_cfg.checkpoint.dir));
  REQUIRE(rest.losses.size() == 3);
  for (int s = 3; s < 6; ++s) CHECK(rest.losses[s - 3] == Approx(cpu.losses[s]).epsilon(1e-3));
}

TEST_CASE("no host synchronisation inside forward/backward and the optimizer step (debug.sync_check)", "[gpu]") {
  select_cuda_device(MPI_COMM_WORLD);
  {  // the check can fire: an .item() under it throws
    const SyncCheck on(true, StepPhase::Forward);
    CHECK_THROWS_AS(torch::ones({1}, kGpu).sum().item<float>(), c10::Error);
  }
  const auto dir = test::shared_dir("gpu-sync");
  for (auto precision : {PrecisionType::Fp32, PrecisionType::Bf16}) {
    CAPTURE(name_of(precision));
    Config c = test::tiny(dir, 4, 4);
    c.train.device = DeviceKind::Cuda;
    c.precision.type = precision;
    c.debug.sync_check = true;
    RunResult r;
    REQUIRE_NOTHROW(r = test::quiet_run(c));
    CHECK(r.losses.size() == 4);
  }
}
