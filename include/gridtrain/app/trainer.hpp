// The training run: builds grid → data → model → reducer → optimizer → pipeline engine → step
// guard from a validated Config and runs the step loop of the house plan (LAMMPS' Verlet::run;
// the report at the end is output/summary, LAMMPS' Finish::end). Collective over the world
// communicator it is given (tests pass MPI_COMM_SELF to get a 1-rank reference run inside an
// MPI job).
#pragma once
#include <memory>
#include <optional>
#include <vector>

#include <mpi.h>

#include "gridtrain/app/fix.hpp"
#include "gridtrain/app/validation.hpp"
#include "gridtrain/checkpoint/checkpointer.hpp"
#include "gridtrain/comm/traffic.hpp"
#include "gridtrain/config/config.hpp"
#include "gridtrain/data/batches.hpp"
#include "gridtrain/data/samples.hpp"
#include "gridtrain/grid/grid.hpp"
#include "gridtrain/model/model.hpp"
#include "gridtrain/optim/lr_schedule.hpp"
#include "gridtrain/optim/optimizer.hpp"
#include "gridtrain/optim/parameter_stack.hpp"
#include "gridtrain/output/summary.hpp"
#include "gridtrain/output/thermo.hpp"
#include "gridtrain/parallel/pipeline_engine.hpp"
#include "gridtrain/plan/launch_plan.hpp"
#include "gridtrain/precision/step_guard.hpp"
#include "gridtrain/util/log.hpp"
#include "gridtrain/util/timer.hpp"

namespace gridtrain {

class Trainer {
 public:
  /// Collective over world. Throws gridtrain::Error for problems every rank sees (the launch
  /// plan, the dataset, a checkpoint to resume). peak_gflops: this rank's peak for MFU and
  /// peak_source where it came from (plan/peak.hpp), for the summary; 0 (the program's way) asks
  /// the Trainer to find it (rank_peak) once the rank is on its device, and to print it.
  Trainer(const Config& cfg, MPI_Comm world, Log& log, double peak_gflops = 0, std::string peak_source = "given");
  ~Trainer();

  /// Runs train.steps steps, printing thermo lines, then the end-of-run summary. Collective.
  RunResult run();

  Model& model() { return *model_; }
  Grid& grid() { return *grid_; }
  Optimizer& optimizer() { return *optimizer_; }
  /// The fp32 master weights of precision.weights = bf16 | fp16; null with fp32 weights.
  const MasterWeights* masters() const { return stack_->masters(); }
  /// The step fixes (app/fix.hpp): sparse training, fault injection, batch-norm replica state.
  Fixes& fixes() { return fixes_; }
  Checkpointer& checkpointer() { return *checkpointer_; }
  /// The parameter groups, each with its gradient Reducer and ZeRO storage.
  ParameterGroups& groups() { return stack_->groups(); }
  /// ZeRO's parameter storage of the dense group, group 0 (at stage 3 WholeParameters(groups())
  /// makes every group's parameters whole).
  ShardedParameters& parameters() { return stack_->groups().group(0).parameters(); }
  /// This rank's model state bytes now (the memory accountant of the summary).
  StateBytes state_bytes();
  /// Micro-batches per step and dp rank (doubled by each out-of-memory back-off).
  int accumulation() const { return guard_->accumulation(); }
  /// Steps completed before run() starts (non-zero after a resume).
  long long start_step() const { return start_step_; }
  /// Global index of the next training sample (the data position).
  std::uint64_t sample_index() const { return sample_index_; }

 private:
  void load_data();
  void build_model();
  void describe_setup() const;
  /// One optimizer step: forward/backward, gradient exchange, verdict, update.
  Verdict train_step(long long s, double lr);
  /// The stage's forward under autocast for step s (the loss through the fixes' on_loss).
  PipelineEngine::Forward stage_forward(long long s);
  /// What the step's loss on this rank is the mean over, from its batch (rows, width): the targets'
  /// items (Model::items), or with data.eod_mask_loss the global batch's / dp (a dp collective).
  double step_items(const torch::Tensor& batch) const;
  /// The step's loss (undefined: 0) and Σ‖g‖² over the gradients this rank counts toward the
  /// global norm, brought to the host together.
  std::pair<double, double> loss_and_grad_sq(const torch::Tensor& loss) const;
  /// The thermo line after `step` steps: the step's figures, the interval's rate and sections,
  /// the time remaining, the memory.
  ThermoRow thermo_row(long long step, double lr, const Verdict& v, const std::optional<Validation::Result>& val,
                       std::uint64_t step_bytes, const Throughput::Rate& rate);
  /// Prints the summary (with the lineage's goodput, thermo's) and fills the rest of the result.
  void finish(RunResult& r, const Throughput& throughput, const Thermo& thermo);

  Stopwatch since_start_;  // first: the start-up before the loop, of the goodput
  const Config cfg_;  // read-only: run-time state lives with its owner (StepGuard: the micro-batch)
  Log& log_;
  double peak_gflops_;
  std::string peak_source_;
  LaunchPlan plan_;
  std::unique_ptr<Grid> grid_;
  int cuda_device_ = -1;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<Samples> samples_;
  std::unique_ptr<BatchPrefetcher> batches_;  // keyed by the step's first global sample
  std::unique_ptr<Validation> validation_;
  std::shared_ptr<Model> model_;
  Timer timer_;
  std::unique_ptr<ParameterStack> stack_;  // the parameters, their data-parallel side, the masters
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<PipelineEngine> engine_;
  std::unique_ptr<StepGuard> guard_;
  Fixes fixes_;
  LrSchedule lr_schedule_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<StepTraffic> traffic_;  // training traffic on dp, tp, pp (the tied pair included)
  long long start_step_ = 0;
  std::uint64_t sample_index_ = 0;  // global sample index of the next step's first sample
  RemainingTime remaining_;         // the thermo lines' time remaining
  SectionRates section_rates_;      // the thermo interval's sections
  std::unique_ptr<StragglerWatch> stragglers_;  // each rank's busy time at the thermo lines
  long long thermo_step_ = 0;       // the step of the last thermo line (start_step_ before the first)
};

}  // namespace gridtrain
