#include "gridtrain/parallel/pipeline_engine.hpp"

#include <vector>

#include "gridtrain/parallel/pipeline.hpp"

namespace gridtrain {

PipelineEngine::PipelineEngine(Grid& grid, PipelineSchedule schedule, ActivationShape activation_shape,
                               torch::Device device, bool first_stage, bool last_stage, bool tied, Timer& timer)
    : grid_(grid), schedule_(schedule), activation_shape_(std::move(activation_shape)), device_(device),
      first_(first_stage), last_(last_stage), timer_(timer) {
  Axis& pp = grid.pp();
  if (pp.size() == 1) return;
  const bool ends = tied && (first_stage || last_stage);
  tied_ = pp.split(ends ? 0 : MPI_UNDEFINED, pp.rank(), "pp (tied embedding)");
}

torch::Tensor PipelineEngine::receive(int peer, int tag, int rows, const char* what) {
  auto t = torch::empty(activation_shape_(rows), torch::TensorOptions(torch::kFloat).device(device_));  // (B, T, C)
  timer_.stamp(Section::Compute);
  grid_.pp().recv(t.data_ptr(), t.nbytes(), peer, tag, what).wait();
  timer_.stamp(Section::PpComm);
  return t;
}

torch::Tensor PipelineEngine::train(int micro_batches, int micro_batch, const MicroBatch& batch, const Forward& forward,
                                    Reducer& reducer, double loss_scale) {
  const int B = micro_batch, M = micro_batches;
  Axis& pp = grid_.pp();
  std::vector<torch::Tensor> inputs(M), outputs(M), losses(M), in_flight;
  std::vector<Work> sends;
  auto send = [&](const torch::Tensor& t, int peer, int tag) {
    in_flight.push_back(t.detach().to(torch::kFloat).contiguous());
    sends.push_back(pp.send(in_flight.back().data_ptr(), in_flight.back().nbytes(), peer, tag, "micro-batch"));
  };
  torch::Tensor loss_sum;  // last stage: Σ losses, on the device
  int backwards_left = M;
  for (const PipeOp& op : pipeline_schedule(schedule_, pp.rank(), pp.size(), M)) {
    const int m = op.micro_batch;
    if (op.kind == PipeOp::Forward) {
      std::pair<torch::Tensor, torch::Tensor> mb;  // {input, targets}
      if (first_ || last_) mb = batch(static_cast<std::int64_t>(m) * B, B);
      timer_.stamp(Section::Data);
      inputs[m] = first_ ? mb.first : receive(pp.rank() - 1, m, B, "micro-batch").requires_grad_();
      if (last_) {
        const auto items = static_cast<double>(mb.second.numel());
        losses[m] = forward(inputs[m], mb.second) / (items * M);
        loss_sum = loss_sum.defined() ? loss_sum + losses[m].detach() : losses[m].detach();
      } else {
        outputs[m] = forward(inputs[m], {});
        send(outputs[m], pp.rank() + 1, m);
      }
    } else {
      reducer.begin_backward(--backwards_left == 0);
      if (last_) (loss_scale != 1.0 ? losses[m] * loss_scale : losses[m]).backward();
      else outputs[m].backward(receive(pp.rank() + 1, m, B, "micro-batch"));
      if (!first_) send(inputs[m].grad(), pp.rank() - 1, m);
      inputs[m] = outputs[m] = losses[m] = torch::Tensor();  // free this micro-batch's activations
    }
    timer_.stamp(Section::Compute);
  }
  for (auto& w : sends) w.wait();
  timer_.stamp(Section::PpComm);
  return loss_sum;
}

std::vector<double> PipelineEngine::evaluate(std::int64_t rows, std::int64_t padded_rows, int micro_batch,
                                             const MicroBatch& batch, const Forward& forward) {
  torch::NoGradGuard no_grad;
  Axis& pp = grid_.pp();
  torch::Tensor sums;  // last stage: (k,) on the host
  for (std::int64_t i = 0; i < padded_rows; i += micro_batch) {
    const bool padding = i >= rows;  // this rank's rows are done; its dp peers' are not
    const int n = padding ? 1 : static_cast<int>(std::min<std::int64_t>(micro_batch, rows - i));
    std::pair<torch::Tensor, torch::Tensor> mb;  // {input, targets}
    torch::Tensor x;                             // the input, or (n, T, C) activations
    if (first_ || last_) mb = batch(i, n);
    if (first_) x = mb.first;
    else {
      x = torch::empty(activation_shape_(n), torch::TensorOptions(torch::kFloat).device(device_));
      pp.recv(x.data_ptr(), x.nbytes(), pp.rank() - 1, 0, "validation").wait();
    }
    if (last_) {
      const auto s = forward(x, mb.second).to(torch::kDouble).cpu();
      if (!padding) sums = sums.defined() ? sums + s : s;
    } else {
      auto h = forward(x, {}).to(torch::kFloat).contiguous();
      pp.send(h.data_ptr(), h.nbytes(), pp.rank() + 1, 0, "validation").wait();
    }
  }
  if (!sums.defined()) return {};
  return {sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel()};
}

void PipelineEngine::sum_tied_gradients(const std::vector<torch::Tensor>& grads) {
  if (!tied_) return;
  for (const auto& g : grads)
    tied_->allreduce_sum(g.data_ptr<float>(), static_cast<std::size_t>(g.numel()), "tied embedding gradient").wait();
}

}  // namespace gridtrain
