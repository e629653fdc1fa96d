#include "gridtrain/parallel/pipeline_engine.hpp"

#include <optional>
#include <vector>

#include "gridtrain/parallel/element.hpp"
#include "gridtrain/parallel/pipeline.hpp"
#include "gridtrain/precision/weight_grad_store.hpp"

namespace gridtrain {
namespace {

// Charges one op's time to its kind of pass: the Compute, TpComm, EpComm and CpComm seconds it adds to
// the timer (its pp waits are PpComm), the Ws the store computed in it to W.
class PassClock {
 public:
  PassClock(Timer& timer, const std::optional<WeightGradStore>& store)
      : timer_(timer), store_(store), work_(work()), weight_(weight()) {}
  /// Ends the op: the time since the last stamp is Compute; then charges it.
  void charge(PipeOp::Kind kind, PipelineEngine::PassSeconds& s) const {
    timer_.stamp(Section::Compute);
    const double w = weight() - weight_;
    (kind == PipeOp::Forward ? s.forward : s.input) += work() - work_ - w;
    s.weight += w;
  }

 private:
  double work() const {
    double s = 0;
    for (const Section in : {Section::Compute, Section::TpComm, Section::EpComm, Section::CpComm}) s += timer_.seconds(in);
    return s;
  }
  double weight() const { return store_ ? store_->weight_seconds() : 0.0; }
  Timer& timer_;
  const std::optional<WeightGradStore>& store_;
  double work_, weight_;
};

}  // namespace

PipelineEngine::PipelineEngine(Grid& grid, PipelineSchedule schedule, int chunks, ActivationShape activation_shape,
                               torch::ScalarType activation_dtype, torch::Device device, bool first_stage,
                               bool last_stage, bool tied, bool input_everywhere, std::int64_t carried, Timer& timer)
    : grid_(grid), schedule_(schedule), chunks_(chunks), activation_shape_(std::move(activation_shape)),
      activations_(torch::TensorOptions(activation_dtype).device(device)), first_(first_stage), last_(last_stage),
      input_everywhere_(input_everywhere), carried_(carried), timer_(timer) {
  Axis& pp = grid.pp();
  if (pp.size() == 1) return;
  const bool ends = tied && (first_stage || last_stage);
  tied_ = pp.split(ends ? 0 : MPI_UNDEFINED, pp.rank(), "pp (tied embedding)");
}

torch::Tensor PipelineEngine::receive(std::vector<std::int64_t> shape, const torch::TensorOptions& options, int peer,
                                      int tag) {
  auto t = torch::empty(shape, options);
  timer_.stamp(Section::Compute);
  grid_.pp().recv(t.data_ptr(), t.nbytes(), peer, tag, "micro-batch").wait();
  timer_.stamp(Section::PpComm);
  return t;
}

torch::Tensor PipelineEngine::train(int micro_batches, int micro_batch, const MicroBatch& batch, const Forward& forward,
                                    const BeforeBackward& before_backward, double items, double loss_scale) {
  const int B = micro_batch, M = micro_batches, v = chunks_;
  Axis& pp = grid_.pp();
  const int p = pp.size(), r = pp.rank();
  const auto fp32 = activations_.dtype(torch::kFloat);  // the carried sums': counts stay exact
  // Per (chunk, micro-batch) pass, at chunk · M + micro-batch.
  std::vector<Pass> inputs(M * v), outputs(M * v);
  std::vector<torch::Tensor> losses(M * v), in_flight;
  std::vector<Work> sends;
  auto send = [&](const torch::Tensor& t, const torch::TensorOptions& as, int peer, int tag) {
    in_flight.push_back(t.detach().to(as.dtype()).contiguous());
    sends.push_back(pp.send(in_flight.back().data_ptr(), in_flight.back().nbytes(), peer, tag, "micro-batch"));
  };
  // A message's tag names the pass that receives it: its micro-batch, chunk, direction (with
  // chunks, both directions can come from the same peer) and whether it holds the carried sums.
  auto tag = [M](bool forward_pass, int m, int chunk, bool sums = false) {
    return 4 * (chunk * M + m) + (forward_pass ? 0 : 1) + (sums ? 2 : 0);
  };
  // The neighbouring virtual stages: chunk c's next is on rank r + 1, or from the last rank
  // chunk c + 1 on rank 0; its previous on rank r − 1, or from rank 0 chunk c − 1 on the last.
  const int next = (r + 1) % p, prev = (r + p - 1) % p;
  torch::Tensor loss_sum;  // last stage: Σ losses, on the device
  int backwards_left = M * v;
  // zb-h1: the linears defer their weight gradients to the store (precision/weight_grad_store.hpp).
  auto store = schedule_ == PipelineSchedule::ZbH1 ? std::optional<WeightGradStore>(std::in_place) : std::nullopt;
  for (const PipeOp& op : pipeline_schedule(schedule_, r, p, M, v)) {
    const PassClock clock(timer_, store);
    const int m = op.micro_batch, c = op.chunk, i = c * M + m;
    const bool begins = first_ && c == 0, ends = last_ && c == v - 1;  // the model's first and last pass
    Pass& in = inputs[i];
    Pass& out = outputs[i];
    if (op.kind == PipeOp::Weight) {
      store->run_oldest();
    } else if (op.kind == PipeOp::Forward) {
      std::pair<torch::Tensor, torch::Tensor> mb;  // {input, targets}
      if (begins || ends || input_everywhere_) mb = batch(static_cast<std::int64_t>(m) * B, B);
      timer_.stamp(Section::Data);
      in.x = begins ? mb.first : receive(activation_shape_(B), activations_, prev, tag(true, m, c)).requires_grad_();
      if (carried_ > 0)
        in.sums = begins ? torch::zeros({carried_}, fp32) : receive({carried_}, fp32, prev, tag(true, m, c, true)).requires_grad_();
      if (ends) {
        losses[i] = forward(in, mb.first, mb.second, c).x / items;
        loss_sum = loss_sum.defined() ? loss_sum + losses[i].detach() : losses[i].detach();
      } else {
        out = forward(in, mb.first, {}, c);
        out.x = out.x.to(activations_.dtype());  // its gradient comes back in that dtype
        const int to = r == p - 1 ? c + 1 : c;
        send(out.x, activations_, next, tag(true, m, to));
        if (carried_ > 0) send(out.sums, fp32, next, tag(true, m, to, true));
      }
    } else {
      before_backward(--backwards_left == 0);
      if (ends) {
        (loss_scale != 1.0 ? losses[i] * loss_scale : losses[i]).backward();
      } else {
        std::vector<torch::Tensor> roots{out.x}, grads{receive(activation_shape_(B), activations_, next, tag(false, m, c))};
        if (carried_ > 0) {
          auto g = receive({carried_}, fp32, next, tag(false, m, c, true));
          if (out.sums.requires_grad()) roots.push_back(out.sums), grads.push_back(std::move(g));  // else: no router yet
        }
        torch::autograd::backward(roots, grads);
      }
      if (!begins) {
        const int to = r == 0 ? c - 1 : c;
        send(in.x.grad(), activations_, prev, tag(false, m, to));
        if (carried_ > 0)  // a stage whose loss or layers did not use them: zeros
          send(in.sums.grad().defined() ? in.sums.grad() : torch::zeros_like(in.sums), fp32, prev, tag(false, m, to, true));
      }
      if (store) store->end_pass(op.split);  // after the input gradient went on
      in = out = Pass{};  // free this pass's activations
      losses[i] = torch::Tensor();
    }
    clock.charge(op.kind, pass_s_);
  }
  pass_s_.micro_batches += M * v;
  for (auto& w : sends) w.wait();
  timer_.stamp(Section::PpComm);
  return loss_sum;
}

std::vector<double> PipelineEngine::evaluate(std::int64_t rows, std::int64_t padded_rows, int micro_batch,
                                             const MicroBatch& batch, const Forward& forward) {
  torch::NoGradGuard no_grad;
  Axis& pp = grid_.pp();
  torch::Tensor sums;  // last stage: (k,) on the host
  const int p = pp.size(), r = pp.rank();
  for (std::int64_t i = 0; i < padded_rows; i += micro_batch) {
    const bool padding = i >= rows;  // this rank's rows are done; its dp peers' are not
    const int n = padding ? 1 : static_cast<int>(std::min<std::int64_t>(micro_batch, rows - i));
    std::pair<torch::Tensor, torch::Tensor> mb;  // {input, targets}
    if (first_ || last_ || input_everywhere_) mb = batch(i, n);
    for (int c = 0; c < chunks_; ++c) {  // through every virtual stage in turn
      const bool begins = first_ && c == 0, ends = last_ && c == chunks_ - 1;
      torch::Tensor x;  // the input, or (n, T, C) activations
      if (begins) x = mb.first;
      else {
        x = torch::empty(activation_shape_(n), activations_);
        pp.recv(x.data_ptr(), x.nbytes(), (r + p - 1) % p, c, "validation").wait();
      }
      if (ends) {
        const auto s = forward({x, {}}, mb.first, mb.second, c).x.to(torch::kDouble).cpu();
        if (!padding) sums = sums.defined() ? sums + s : s;
      } else {
        auto h = forward({x, {}}, mb.first, {}, c).x.to(activations_.dtype()).contiguous();
        pp.send(h.data_ptr(), h.nbytes(), (r + 1) % p, r == p - 1 ? c + 1 : c, "validation").wait();
      }
    }
  }
  if (!sums.defined()) return {};
  return {sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel()};
}

void PipelineEngine::sum_tied_gradients(const std::vector<torch::Tensor>& grads) {
  if (!tied_) return;
  for (const auto& g : grads)
    tied_->allreduce_sum(g.data_ptr(), static_cast<std::size_t>(g.numel()), element_of(g), "tied embedding gradient").wait();
}

}  // namespace gridtrain
