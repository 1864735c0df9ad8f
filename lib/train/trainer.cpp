#include "train/trainer.hpp"

#include "base/error.hpp"
#include "base/hash.hpp"
#include "io/atomic.hpp"
#include "io/h5.hpp"
#include "trace/trace.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>

namespace acc::train {

std::uint64_t checksum(const std::vector<torch::Tensor>& tensors) {
    std::uint64_t hash = kFnv1aStart;
    for (const auto& t : tensors) {
        torch::Tensor host = t.detach().to(torch::kCPU).contiguous();
        hash = fnv1a(host.data_ptr(), host.nbytes(), hash);
    }
    return hash;
}

namespace {

// Checkpoint tensors: one HDF5 dataset each, with a 'dtype' attribute that
// also tells datasets from groups when reading /extra back.
const char* dtype_name(torch::ScalarType type) {
    switch (type) {
    case torch::kFloat32: return "float32";
    case torch::kFloat64: return "float64";
    case torch::kInt64: return "int64";
    case torch::kInt32: return "int32";
    case torch::kUInt8: return "uint8";
    case torch::kInt8: return "int8";
    case torch::kFloat16: return "float16";
    case torch::kBFloat16: return "bfloat16";
    default: return nullptr;
    }
}

template <class T>
void write_values(io::H5File& f, const std::string& name, const torch::Tensor& t, const io::Dims& dims) {
    const T* data = t.data_ptr<T>();
    f.write(name, std::vector<T>(data, data + t.numel()), dims);
}

void write_tensor(io::H5File& f, const std::string& name, const torch::Tensor& tensor) {
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    const char* dtype = dtype_name(t.scalar_type());
    if (!dtype) f.fail("cannot store tensor " + name + " of type " + std::string(c10::toString(t.scalar_type())));
    io::Dims dims(t.sizes().begin(), t.sizes().end());
    switch (t.scalar_type()) {
    case torch::kFloat64: write_values<double>(f, name, t, dims); break;
    case torch::kInt64: write_values<std::int64_t>(f, name, t, dims); break;
    case torch::kInt32: write_values<std::int32_t>(f, name, t, dims); break;
    case torch::kUInt8: write_values<std::uint8_t>(f, name, t, dims); break;
    case torch::kInt8: write_values<std::int8_t>(f, name, t, dims); break;
    default: write_values<float>(f, name, t.to(torch::kFloat32), dims); break;  // float32, and 16-bit floats widened
    }
    f.write_attr(name, "dtype", std::string(dtype));
}

template <class T>
torch::Tensor read_values(const io::H5File& f, const std::string& name, torch::ScalarType type) {
    io::Dims dims;
    std::vector<T> values = f.read<T>(name, &dims);
    std::vector<std::int64_t> sizes(dims.begin(), dims.end());
    return torch::from_blob(values.data(), sizes, type).clone();
}

// `checksummed`: the file is of a format version whose writer gives every
// tensor a checksum, so one without is refused.
torch::Tensor read_tensor(const io::H5File& f, const std::string& name, bool checksummed) {
    if (!f.exists(name)) f.fail("dataset " + name + " is missing");
    const io::Dims dims = f.shape(name);
    if (checksummed && !dims.empty() && io::element_count(dims) > 0 && !f.has_checksum(name))
        f.fail("dataset " + name + " has no checksum; every tensor of this checkpoint's format carries one, so the "
               "file was altered");
    const std::string dtype = f.has_attr(name, "dtype") ? f.read_attr_string(name, "dtype") : "float32";
    if (dtype == "float64") return read_values<double>(f, name, torch::kFloat64);
    if (dtype == "int64") return read_values<std::int64_t>(f, name, torch::kInt64);
    if (dtype == "int32") return read_values<std::int32_t>(f, name, torch::kInt32);
    if (dtype == "uint8") return read_values<std::uint8_t>(f, name, torch::kUInt8);
    if (dtype == "int8") return read_values<std::int8_t>(f, name, torch::kInt8);
    torch::Tensor t = read_values<float>(f, name, torch::kFloat32);
    if (dtype != "float32" && dtype != "float16" && dtype != "bfloat16")
        f.fail(name + " has unknown dtype '" + dtype + "'");
    // A run that diverged stops before it saves: NaN or infinity here is damage, which
    // would otherwise show up later as "training diverged".
    if (!torch::isfinite(t).all().item<bool>())
        f.fail(name + " holds NaN or infinity; a checkpoint's values are finite, so the file is damaged");
    if (dtype == "float16") return t.to(torch::kFloat16);
    if (dtype == "bfloat16") return t.to(torch::kBFloat16);
    return t;
}

// Copies a stored tensor into `target`, which fixes the expected shape.
void restore(const io::H5File& f, const std::string& name, torch::Tensor target, bool checksummed) {
    torch::Tensor stored = read_tensor(f, name, checksummed);
    if (stored.sizes() != target.sizes())
        f.fail(name + " has shape " + io::shape_text(stored.sizes().vec()) + ", expected " +
               io::shape_text(target.sizes().vec()));
    torch::NoGradGuard no_grad;
    target.copy_(stored);
}

// Reads every tensor below `group` into `out`, keyed by its path relative to `root`.
void read_tree(const io::H5File& f, const std::string& group, const std::string& prefix, TensorMap& out,
               bool checksummed) {
    for (const auto& name : f.list(group)) {
        const std::string path = group + "/" + name;
        if (f.has_attr(path, "dtype"))
            out[prefix + name] = read_tensor(f, path, checksummed);
        else if (f.is_dataset(path))
            f.fail("dataset " + path + " has no 'dtype' attribute; every tensor of a checkpoint names its dtype");
        else
            read_tree(f, path, prefix + name + "/", out, checksummed);
    }
}

// Moves the model to `device` and returns its parameters, in model order.
std::vector<torch::Tensor> parameters_on(Model& model, torch::Device device) {
    model.to(device);
    return model.parameters();
}

double l2_norm(const torch::Tensor& t) { return t.norm().item<double>(); }

// Throws acc::Error when a step's loss is NaN or infinite.
void check_finite_loss(double loss, std::int64_t epoch, std::int64_t step) {
    if (!std::isfinite(loss))
        throw Error("training diverged: the loss is " + std::string(std::isnan(loss) ? "NaN" : "infinite") +
                    " at epoch " + std::to_string(epoch) + ", step " + std::to_string(step) +
                    " (try a lower --lr or --clip-norm)");
}

// How long a GPU run's step callbacks may lag behind the steps (see train_epoch).
constexpr double kCallbackSeconds = 0.5;

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GradientRecorder::GradientRecorder(const std::vector<torch::Tensor>& parameters, bool step_norms)
    : step_norms_(step_norms) {
    for (const auto& p : parameters) sums_.push_back(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
}

void GradientRecorder::reset() {
    for (auto& s : sums_) s.zero_();
    last_step_.clear();
}

void GradientRecorder::add(const std::vector<torch::Tensor>& gradients) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < sums_.size(); ++i) sums_[i].add_(gradients[i]);
    if (step_norms_) {
        last_step_.resize(gradients.size());
        for (size_t i = 0; i < gradients.size(); ++i) last_step_[i] = l2_norm(gradients[i]);
    }
}

std::vector<double> GradientRecorder::norms() const {
    std::vector<double> out;
    out.reserve(sums_.size());
    for (const auto& s : sums_) out.push_back(l2_norm(s.to(torch::kFloat64)));
    return out;
}

std::vector<double> GradientRecorder::finite_norms(const std::vector<io::Parameter>& parameters,
                                                   std::int64_t epoch) const {
    std::vector<double> out = norms();
    for (size_t p = 0; p < out.size(); ++p)
        if (!std::isfinite(out[p]))
            throw Error("training diverged: the summed gradient of '" + parameters.at(p).name + "' has norm " +
                        (std::isnan(out[p]) ? "NaN" : "infinity") + " at epoch " + std::to_string(epoch) +
                        " (try a lower --lr or --clip-norm)");
    return out;
}

Sgd::Sgd(std::vector<torch::Tensor> parameters, OptimizerConfig config)
    : parameters_(std::move(parameters)),
      config_(config),
      momentum_(parameters_.size()),
      momentum_in_gradient_(parameters_.size(), false) {}

void Sgd::set_momentum_in_gradient(std::vector<bool> flags) {
    if (flags.size() != parameters_.size())
        throw Error("internal error: momentum flags for " + std::to_string(flags.size()) + " of " +
                    std::to_string(parameters_.size()) + " parameters");
    momentum_in_gradient_ = std::move(flags);
}

void Sgd::step(const std::vector<torch::Tensor>& gradients, double lr) {
    torch::NoGradGuard no_grad;
    // The common case goes through the multi-tensor (_foreach_) ops: a few
    // kernels per step for all parameters on a GPU, and on a CPU the same
    // elementwise operations in the same order as one parameter at a time,
    // so the results are bit-identical to torch.optim.SGD's.
    std::vector<size_t> plain;
    plain.reserve(parameters_.size());
    for (size_t i = 0; i < parameters_.size(); ++i) {
        if (!momentum_in_gradient_[i]) {
            plain.push_back(i);
            continue;
        }
        // DGC's momentum correction: only the weight-decay term still needs momentum.
        const torch::Tensor& g = gradients[i];
        if (config_.weight_decay == 0) {
            parameters_[i].add_(g, -lr);
            continue;
        }
        torch::Tensor decay = parameters_[i].mul(config_.weight_decay);
        if (config_.momentum != 0) {
            torch::Tensor& buffer = momentum_[i];
            if (!buffer.defined())
                buffer = decay.clone();
            else
                buffer.mul_(config_.momentum).add_(decay);
            decay = config_.nesterov ? decay.add(buffer, config_.momentum) : buffer;
        }
        parameters_[i].add_(g.add(decay), -lr);
    }
    if (plain.empty()) return;

    std::vector<torch::Tensor> params, grads;
    params.reserve(plain.size());
    grads.reserve(plain.size());
    for (size_t i : plain) {
        params.push_back(parameters_[i]);
        grads.push_back(gradients[i]);
    }
    if (config_.weight_decay != 0) grads = at::_foreach_add(grads, params, config_.weight_decay);
    if (config_.momentum != 0) {
        // buf = g at a parameter's first step, else buf = m * buf + g.
        std::vector<torch::Tensor> buffers, continuing, continuing_grads;
        buffers.reserve(plain.size());
        for (size_t k = 0; k < plain.size(); ++k) {
            torch::Tensor& buffer = momentum_[plain[k]];
            if (!buffer.defined()) {
                buffer = grads[k].detach().clone();
            } else {
                continuing.push_back(buffer);
                continuing_grads.push_back(grads[k]);
            }
            buffers.push_back(buffer);
        }
        if (!continuing.empty()) {
            at::_foreach_mul_(continuing, config_.momentum);
            at::_foreach_add_(continuing, continuing_grads);
        }
        grads = config_.nesterov ? at::_foreach_add(grads, buffers, config_.momentum) : buffers;
    }
    at::_foreach_add_(params, grads, -lr);
}

TrainerOptions trainer_options(const TrainConfig& config) {
    TrainerOptions o;
    o.batch_size = config.batch_size;
    o.micro_batch_size = config.micro_batch_size;
    o.optimizer = config.optimizer;
    o.clip_norm = config.clip_norm;
    o.seed = config.seed;
    o.device = config.device == acc::Device::cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
    return o;
}

Trainer::Trainer(std::shared_ptr<Model> model, const Dataset& data, TrainerOptions options, Shard shard)
    : model_(std::move(model)),
      data_(data),
      options_(options),
      shard_(shard),
      parameters_(parameters_on(*model_, options.device)),
      description_(describe_parameters(*model_)),
      sgd_(parameters_, options.optimizer) {
    if (options_.device.is_cuda()) data_.use_device(options_.device);
    check_batches(options_.batch_size);
}

void Trainer::check_batches(std::int64_t batch_size) const {
    // Every rank checks every rank's shard, so that all stop together with the same
    // words, which the --nproc launcher then prints once.
    const int world = shard_.world_size;
    int without = 0;
    for (int r = 0; r < world; ++r)
        if (batch_size < 1 || data_.train(0, Shard{r, world}, batch_size, options_.seed)->size() == 0) ++without;
    if (without == 0) return;
    const std::string ranks = world == 1         ? ""
                              : without == world ? " each of the " + std::to_string(world) + " ranks"
                                                 : " " + std::to_string(without) + " of the " + std::to_string(world) +
                                                       " ranks";
    throw UsageError("--batch-size: the training split (" + std::to_string(data_.info().train_size) + " " +
                     data_.info().unit + ") gives" + ranks + " no batch of at least 2 samples at batch size " +
                     std::to_string(batch_size));
}

void Trainer::set_batch_size(std::int64_t batch_size) {
    if (batch_size == options_.batch_size) return;
    check_batches(batch_size);
    options_.batch_size = batch_size;
}

std::int64_t Trainer::steps_in_epoch(std::int64_t epoch) const {
    return data_.train(epoch, shard_, options_.batch_size, options_.seed)->size();
}

namespace {

// On a GPU, `on_step` gets the steps' losses in batches, read together at most
// every kCallbackSeconds and at the end of the epoch, so that the progress line
// does not make every step wait for the device.
class PendingSteps {
public:
    PendingSteps(const StepCallback& on_step, std::int64_t epoch) : on_step_(on_step), epoch_(epoch) {}

    void add(const StepInfo& info, const torch::Tensor& loss, std::int64_t samples) {
        pending_.push_back({info, loss, samples});
        if (seconds_since(last_delivery_) >= kCallbackSeconds) deliver();
    }

    void deliver() {
        if (pending_.empty()) return;
        std::vector<torch::Tensor> losses;
        losses.reserve(pending_.size());
        for (const auto& p : pending_) losses.push_back(p.loss);
        const torch::Tensor values = torch::stack(losses).cpu();
        const double* value = values.data_ptr<double>();
        for (size_t k = 0; k < pending_.size(); ++k) {
            check_finite_loss(value[k], epoch_, pending_[k].info.step);
            on_step_(pending_[k].info, value[k], pending_[k].samples);
        }
        pending_.clear();
        last_delivery_ = std::chrono::steady_clock::now();
    }

private:
    struct Step {
        StepInfo info;
        torch::Tensor loss;
        std::int64_t samples;
    };
    const StepCallback& on_step_;
    std::int64_t epoch_;
    std::vector<Step> pending_;
    std::chrono::steady_clock::time_point last_delivery_ = std::chrono::steady_clock::now();
};

// Losses no step read (no `on_step`): checked for divergence once, when the epoch ends.
class UnreadLosses {
public:
    void add(const torch::Tensor& loss, std::int64_t step) {
        losses_.push_back(loss);
        steps_.push_back(step);
    }
    void check(std::int64_t epoch) const {
        if (losses_.empty()) return;
        const torch::Tensor finite = torch::isfinite(torch::stack(losses_)).cpu();
        const auto* ok = finite.data_ptr<bool>();
        for (size_t k = 0; k < losses_.size(); ++k)
            if (!ok[k]) check_finite_loss(losses_[k].item<double>(), epoch, steps_[k]);
    }

private:
    std::vector<torch::Tensor> losses_;
    std::vector<std::int64_t> steps_;
};

// The watched steps of one epoch (--trace): the window clipped to the epoch's end,
// started before its first step and stopped after its last, inside a range of its own.
class EpochWindow {
public:
    EpochWindow(std::optional<StepWindow> window, std::int64_t epoch, std::int64_t steps)
        : window_(std::move(window)), epoch_(epoch) {
        if (window_ && window_->count > 0 && steps > 0) {
            first_ = std::min(window_->first, std::max<std::int64_t>(0, steps - window_->count));
            last_ = std::min(steps, first_ + window_->count);
        }
    }
    void before_step(std::int64_t i) {
        if (i != first_) return;
        window_->start();
        range_ = trace::range("epoch " + std::to_string(epoch_) + ", steps " + std::to_string(first_) + " to " +
                              std::to_string(last_ - 1));
    }
    void after_step(std::int64_t i) {
        if (i + 1 != last_) return;
        range_.reset();
        window_->stop(epoch_, first_, last_);
    }

private:
    std::optional<StepWindow> window_;
    std::int64_t epoch_;
    std::int64_t first_ = -1, last_ = -1;
    std::unique_ptr<at::RecordFunction> range_;
};

}  // namespace

// One step's forward and backward passes. Micro-batches: each loss is weighted by
// its share of the batch, so the accumulated gradient is that of the mean loss over
// the whole batch. Returns the step's loss, where the model runs; adds the step's
// right answers to `correct`.
torch::Tensor Trainer::forward_backward(const Batch& batch, const StepInfo& info, torch::Tensor& correct) {
    // Batches already on the device stay there; from pinned memory, the copy to a GPU runs asynchronously.
    auto to_device = [&](const torch::Tensor& t) {
        if (!options_.device.is_cuda() || t.is_cuda()) return t.to(options_.device);
        return t.pin_memory().to(options_.device, /*non_blocking=*/true);
    };
    torch::Tensor input = to_device(batch.input);
    torch::Tensor target = to_device(batch.target);
    std::vector<torch::Tensor> defined_grads;
    for (auto& p : parameters_)
        if (p.grad().defined()) defined_grads.push_back(p.grad());
    if (!defined_grads.empty()) at::_foreach_zero_(defined_grads);

    const std::int64_t rows = input.size(0);
    std::int64_t micro = options_.micro_batch_size > 0 ? options_.micro_batch_size : rows;
    if (micro < rows && rows != batch.samples)
        throw Error("micro-batches apply only to data with one sample per row (not text)");
    torch::Tensor step_loss;  // the host's 0 + x is x exactly: start from the first part
    for (std::int64_t first = 0; first < rows; first += micro) {
        const std::int64_t count = std::min(micro, rows - first);
        torch::Tensor part_input = count == rows ? input : input.slice(0, first, first + count);
        torch::Tensor part_target = count == rows ? target : target.slice(0, first, first + count);
        torch::Tensor logits = model_->forward(part_input);
        torch::Tensor loss = torch::nn::functional::cross_entropy(logits, part_target);
        const double share = static_cast<double>(part_target.size(0)) / static_cast<double>(batch.samples);
        if (exchange_ && options_.clip_norm <= 0 && first + count >= rows) exchange_->before_backward(info, first > 0);
        (count == rows ? loss : loss * share).backward();
        torch::Tensor part_loss = loss.detach().to(torch::kFloat64).mul(share);
        step_loss = step_loss.defined() ? step_loss.add_(part_loss) : part_loss;
        correct.add_(logits.detach().argmax(1).eq(part_target).sum());
    }
    return step_loss;
}

// The step's gradients, zeros where a parameter has none, clipped as
// torch.nn.utils.clip_grad_norm_ when --clip-norm is set: all scaled by
// max_norm / (total_norm + 1e-6) if that is < 1, computed where the gradients are
// (squares summed in double), so that no step waits for a GPU to read a norm.
void Trainer::step_gradients(std::vector<torch::Tensor>& gradients) const {
    for (size_t p = 0; p < parameters_.size(); ++p)
        gradients[p] = parameters_[p].grad().defined() ? parameters_[p].grad() : torch::zeros_like(parameters_[p]);
    if (options_.clip_norm <= 0) return;
    std::vector<torch::Tensor> norms;
    norms.reserve(gradients.size());
    for (const auto& g : gradients) norms.push_back(g.norm());
    const torch::Tensor total = torch::stack(norms).to(torch::kDouble).square().sum().sqrt();
    const torch::Tensor coefficient = (options_.clip_norm / (total + 1e-6)).clamp_max(1.0).to(torch::kFloat);
    for (auto& g : gradients) g.mul_(coefficient);
}

EpochResult Trainer::train_epoch(std::int64_t epoch, double lr, const StepCallback& on_step) {
    const auto start = std::chrono::steady_clock::now();
    // Dropout draws from a stream of its own per epoch and rank, so a resumed run repeats it exactly.
    seed_generators(
        mix_seed(options_.seed, 0xd0, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(shard_.rank)),
        options_.device);
    model_->train();
    model_->reset_state();
    if (recorder_) recorder_->reset();
    auto batches = data_.train(epoch, shard_, options_.batch_size, options_.seed);
    std::vector<torch::Tensor> gradients(parameters_.size());
    EpochResult result;
    // Loss and correct count accumulate where the model runs (the loss in double,
    // with the same operations the host did, so the printed numbers do not
    // change) and are read once at the end: no step waits for the device unless
    // `on_step` needs the step's loss. Steps whose loss was not read are checked
    // for divergence at the end.
    const torch::TensorOptions on_device = torch::TensorOptions().device(options_.device);
    torch::Tensor loss_sum = torch::zeros({}, on_device.dtype(torch::kFloat64));
    torch::Tensor correct = torch::zeros({}, on_device.dtype(torch::kInt64));
    UnreadLosses unread;
    // Per-step gradient norms are read every step anyway (and belong to the step):
    // then every step is delivered as it ends, as on the CPU, where reading a loss costs nothing.
    const bool batched_callback =
        on_step && options_.device.is_cuda() && !(recorder_ && recorder_->keeps_step_norms());
    PendingSteps pending(on_step, epoch);
    const std::int64_t steps = batches->size();
    EpochWindow window(std::move(window_), epoch, steps);
    window_.reset();
    for (std::int64_t i = 0; i < steps; ++i) {
        window.before_step(i);
        auto step_range = trace::range("step");
        const auto step_started = std::chrono::steady_clock::now();
        std::unique_ptr<at::RecordFunction> part;
        auto next_part = [&part](const char* name) {
            part.reset();  // ended before the next begins
            part = trace::range(name);
        };
        next_part("data");
        Batch batch = batches->get(i);
        next_part("forward and backward");
        const StepInfo info{epoch, i, global_step_, lr, batch.samples, step_started};
        torch::Tensor step_loss = forward_backward(batch, info, correct);
        double step_loss_value = NAN;
        if (on_step && !batched_callback) {
            step_loss_value = step_loss.item<double>();
            check_finite_loss(step_loss_value, epoch, i);
        } else if (!on_step) {
            unread.add(step_loss, i);
        }
        step_gradients(gradients);
        if (recorder_) recorder_->add(gradients);
        next_part("gradient exchange");
        if (exchange_) exchange_->exchange(gradients, info);
        next_part("optimizer");
        sgd_.step(gradients, lr);
        part.reset();
        ++global_step_;
        ++result.steps;
        result.samples += batch.samples;
        loss_sum.add_(step_loss.mul(static_cast<double>(batch.samples)));
        if (batched_callback) pending.add(info, step_loss, batch.samples);
        else if (on_step) on_step(info, step_loss_value, batch.samples);
        step_range.reset();
        window.after_step(i);
    }
    if (exchange_) exchange_->settle();  // before the losses, which a NaN gradient made NaN
    pending.deliver();
    unread.check(epoch);
    const double loss_total = loss_sum.item<double>();
    const std::int64_t correct_total = correct.item<std::int64_t>();
    result.loss = result.samples ? loss_total / static_cast<double>(result.samples) : 0;
    result.accuracy = result.samples ? static_cast<double>(correct_total) / static_cast<double>(result.samples) : 0;
    result.seconds = seconds_since(start);
    return result;
}

EvalResult Trainer::evaluate(Shard shard) {
    torch::NoGradGuard no_grad;
    model_->eval();
    model_->reset_state();
    auto batches = data_.test(options_.batch_size);
    EvalResult result;
    // Sums on the device, read once (the loss in double, as the host would add it).
    const torch::TensorOptions on_device = torch::TensorOptions().device(options_.device);
    torch::Tensor loss_sum = torch::zeros({}, on_device.dtype(torch::kFloat64));
    torch::Tensor correct = torch::zeros({}, on_device.dtype(torch::kInt64));
    // A contiguous run of batches per rank, so that text keeps its hidden state within it.
    const std::int64_t world = std::max(1, shard.world_size), n = batches->size();
    const std::int64_t first = n * shard.rank / world, last = n * (shard.rank + 1) / world;
    for (std::int64_t i = first; i < last; ++i) {
        Batch batch = batches->get(i);
        torch::Tensor target = batch.target.to(options_.device);
        torch::Tensor logits = model_->forward(batch.input.to(options_.device));
        loss_sum.add_(torch::nn::functional::cross_entropy(
                          logits, target, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                          .to(torch::kFloat64));
        correct.add_(logits.argmax(1).eq(target).sum());
        result.samples += batch.samples;
    }
    model_->train();
    model_->reset_state();
    if (result.samples > 0) {
        result.loss = loss_sum.item<double>() / static_cast<double>(result.samples);
        result.accuracy = static_cast<double>(correct.item<std::int64_t>()) / static_cast<double>(result.samples);
    }
    return result;
}

void Trainer::write_checkpoint(io::AtomicPath& target, const CheckpointInfo& info, const TensorMap& extra) const {
    io::H5File f = io::H5File::create(target.temp(), target.destination());
    io::write_header(f, {kCheckpointFormat, 1, kCheckpointMinor, info.provenance, ""});
    f.write_attr("/", "epoch", info.epoch);
    f.write_attr("/", "global_step", info.global_step);
    f.write_attr("/", "model", info.model);
    f.write_attr("/", "dataset", info.dataset);
    f.write_attr("/", "batch_size", info.batch_size);
    f.write_attr("/", "world_size", info.world_size);
    f.write_attr("/", "seed", static_cast<std::int64_t>(info.seed));
    io::write_parameters(f, description_);
    for (const auto& item : model_->named_parameters()) write_tensor(f, "/model/" + item.key(), item.value());
    for (const auto& item : model_->named_buffers()) write_tensor(f, "/buffers/" + item.key(), item.value());
    for (size_t i = 0; i < description_.size(); ++i)
        if (sgd_.momentum()[i].defined())
            write_tensor(f, "/optimizer/momentum/" + description_[i].name, sgd_.momentum()[i]);
    for (const auto& [name, tensor] : extra) write_tensor(f, "/extra/" + name, tensor);
    f.close();
}

CheckpointInfo Trainer::load_checkpoint(const std::string& path, TensorMap* extra) {
    return load_checkpoint_from(io::H5File::open(path, false), extra);
}

CheckpointInfo Trainer::load_checkpoint_image(const std::vector<std::uint8_t>& bytes, const std::string& path,
                                              TensorMap* extra) {
    return load_checkpoint_from(io::H5File::open_image(bytes, path), extra);
}

CheckpointInfo Trainer::load_checkpoint_from(const io::H5File& f, TensorMap* extra) {
    CheckpointInfo info;
    const io::FileHeader header = io::read_header(f, kCheckpointFormat, 1);
    info.provenance = header.provenance;
    info.checksummed = header.minor >= 1;
    const std::string mismatch = io::compare_parameters(description_, io::read_parameters(f));
    if (!mismatch.empty()) f.fail("does not belong to this model: " + mismatch);
    info.epoch = f.read_attr_int("/", "epoch");
    info.global_step = f.read_attr_int("/", "global_step");
    info.model = f.read_attr_string("/", "model");
    info.dataset = f.read_attr_string("/", "dataset");
    info.batch_size = f.read_attr_int("/", "batch_size");
    info.world_size = f.read_attr_int("/", "world_size");
    info.seed = static_cast<std::uint64_t>(f.read_attr_int("/", "seed"));
    if (info.epoch < 0 || info.global_step < 0) f.fail("epoch and global_step must be >= 0");
    const bool sums = info.checksummed;
    for (const auto& item : model_->named_parameters()) restore(f, "/model/" + item.key(), item.value(), sums);
    for (const auto& item : model_->named_buffers()) restore(f, "/buffers/" + item.key(), item.value(), sums);
    for (size_t i = 0; i < description_.size(); ++i) {
        const std::string name = "/optimizer/momentum/" + description_[i].name;
        sgd_.momentum()[i] = torch::Tensor();
        if (f.exists(name)) {
            sgd_.momentum()[i] = torch::zeros_like(parameters_[i]);
            restore(f, name, sgd_.momentum()[i], sums);
        }
    }
    TensorMap stored;
    if (f.exists("/extra")) read_tree(f, "/extra", "", stored, sums);
    if (extra) *extra = std::move(stored);
    global_step_ = info.global_step;
    return info;
}

void seed_generators(std::uint64_t seed, const torch::Device& device) {
    if (device.is_cuda()) {
        torch::manual_seed(seed);
        return;
    }
    auto generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
}

}  // namespace acc::train
