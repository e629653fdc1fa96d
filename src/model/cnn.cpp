#include "gridtrain/model/cnn.hpp"

#include <cmath>
#include <stdexcept>

#include "gridtrain/config/config.hpp"
#include "gridtrain/util/error.hpp"
#include "gridtrain/util/hash.hpp"

namespace gridtrain {

namespace F = torch::nn::functional;

CnnPlan::CnnPlan(const CnnShape& s) : s_(s) {
  const int down = 1 << s.widths.size();
  if (s.height % down != 0 || s.width % down != 0)
    throw Error("model.channels has " + std::to_string(s.widths.size()) + " stages, each halving the image, but the "
                "images are " + std::to_string(s.height) + "x" + std::to_string(s.width) + "; valid: H and W divisible by " +
                std::to_string(down) + " (fewer stages)");
}

std::int64_t CnnPlan::head_features() const {
  const std::int64_t down = std::int64_t{1} << s_.widths.size();
  return s_.widths.back() * (s_.height / down) * (s_.width / down);
}

std::int64_t CnnPlan::parameters() const {
  std::int64_t n = 0, in = s_.channels;
  for (const std::int64_t w : s_.widths) {
    n += 9 * in * w + 9 * w * w + 4 * w;  // two convs, two batch-norms (weight, bias)
    in = w;
  }
  return n + head_features() * s_.classes + s_.classes;
}

double CnnPlan::flops_per_item() const {
  double macs = 0.0, in = s_.channels, hw = static_cast<double>(s_.height) * s_.width;
  for (const double w : s_.widths) {
    macs += hw * 9.0 * (in * w + w * w);
    in = w;
    hw /= 4.0;
  }
  macs += static_cast<double>(head_features()) * s_.classes;
  return 3.0 * 2.0 * macs;
}

double CnnPlan::activation_bytes(int micro_batch, int elem_bytes, int in_flight) const {
  double bytes = 0.0, in = s_.channels, hw = static_cast<double>(s_.height) * s_.width;
  for (const double w : s_.widths) {
    bytes += hw * (in + 4.0 * w) * elem_bytes + hw / 4.0 * w * 8.0;  // input, 2 bn inputs, 2 relu outputs; indices
    in = w;
    hw /= 4.0;
  }
  return static_cast<double>(in_flight) * micro_batch * bytes;
}

Cnn::Stage::Stage(int in, int out) {
  auto conv = [](int i, int o) { return torch::nn::Conv2d(torch::nn::Conv2dOptions(i, o, 3).padding(1).bias(false)); };
  conv1 = register_module("conv1", conv(in, out));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(out));
  conv2 = register_module("conv2", conv(out, out));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(out));
}

torch::Tensor Cnn::Stage::forward(torch::Tensor x) {
  x = torch::relu(bn1->forward(conv1->forward(x)));
  x = torch::relu(bn2->forward(conv2->forward(x)));
  return F::max_pool2d(x, F::MaxPool2dFuncOptions(2));
}

Cnn::Cnn(const CnnShape& s) : plan_(s) {
  int in = s.channels;
  for (std::size_t i = 0; i < s.widths.size(); ++i) {
    stages_.push_back(register_module("stage" + std::to_string(i), std::make_shared<Stage>(in, s.widths[i])));
    in = s.widths[i];
  }
  head_ = register_module("head", torch::nn::Linear(plan_.head_features(), s.classes));
}

std::pair<torch::Tensor, torch::Tensor> Cnn::split(const torch::Tensor& rows) const {
  const CnnShape& s = plan_.shape();
  const std::int64_t pixels = static_cast<std::int64_t>(s.channels) * s.height * s.width;
  auto images = rows.slice(1, 0, pixels).to(torch::kFloat).div_(255.0).view({-1, s.channels, s.height, s.width});
  return {images, rows.select(1, pixels)};
}

torch::Tensor Cnn::stage_forward(const torch::Tensor& images, int, const torch::Tensor&) {
  torch::Tensor x = images;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    gather(static_cast<int>(i));
    x = release(static_cast<int>(i), stages_[i]->forward(x));
  }
  const int head = static_cast<int>(stages_.size());
  gather(head);
  return release(head, head_->forward(x.flatten(1)));  // (B, classes)
}

// In fp32 whatever autocast computed the logits in.
torch::Tensor Cnn::head_loss_sum(const torch::Tensor& logits, const torch::Tensor& labels) {
  return F::cross_entropy(logits.to(torch::kFloat), labels, F::CrossEntropyFuncOptions().reduction(torch::kSum));
}

torch::Tensor Cnn::head_sums(const torch::Tensor& logits, const torch::Tensor& labels) {
  const auto correct = logits.argmax(1).eq(labels).sum().to(torch::kFloat);
  return torch::stack({head_loss_sum(logits, labels), correct});
}

torch::Tensor Cnn::loss(const torch::Tensor& images, const torch::Tensor& labels) {
  return head_loss_sum(stage_forward(images), labels) / static_cast<double>(labels.size(0));
}

std::vector<std::pair<std::string, torch::Tensor>> Cnn::replica_state() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& b : named_buffers(true))
    if (b.key().ends_with("running_mean") || b.key().ends_with("running_var")) out.emplace_back(b.key(), b.value());
  return out;
}

ShardSpec Cnn::shard(const std::string& name) const {
  const auto params = named_parameters(true), buffers = named_buffers(true);
  for (const auto* list : {&params, &buffers})
    if (const auto* t = list->find(name)) return {t->sizes().vec()};
  throw std::invalid_argument("Cnn has no tensor " + name);
}

TensorClass Cnn::tensor_class(const std::string& name) const {
  return name == "head.weight" ? TensorClass::Head : Model::tensor_class(name);
}

double Cnn::weight_flops_per_item(const std::string& name) const {
  if (tensor_class(name) != TensorClass::Conv) return Model::weight_flops_per_item(name);
  const int stage = unit_of(name);  // stage s sees (H/2^s)·(W/2^s) positions
  const CnnShape& s = plan_.shape();
  const double positions = static_cast<double>(s.height >> stage) * static_cast<double>(s.width >> stage);
  return 6.0 * positions * static_cast<double>(named_parameters(true)[name].numel());
}

std::string Cnn::describe() const { return "cnn, channels " + comma_list(plan_.shape().widths); }

int Cnn::unit_of(const std::string& name) const {
  if (name.starts_with("head.")) return static_cast<int>(stages_.size());
  if (name.starts_with("stage")) return std::stoi(name.substr(5));
  throw std::invalid_argument("Cnn has no parameter " + name);
}

void Cnn::initialize(std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters(true)) {
    const std::string& name = p.key();
    auto gen = at::detail::createCPUGenerator(splitmix64(seed ^ fnv1a(name)));
    auto& t = p.value();
    const double fan_in = t.dim() > 1 ? static_cast<double>(t[0].numel()) : 1.0;
    if (name.ends_with(".bias")) t.zero_();
    else if (name.find(".bn") != std::string::npos) t.fill_(1.0);
    else if (name.starts_with("head.")) t.normal_(0.0, 1.0 / std::sqrt(fan_in), gen);
    else t.normal_(0.0, std::sqrt(2.0 / fan_in), gen);
  }
  for (auto& b : named_buffers(true)) {  // running statistics start at mean 0, variance 1
    if (b.key().ends_with("running_var")) b.value().fill_(1.0);
    else b.value().zero_();
  }
}

}  // namespace gridtrain
