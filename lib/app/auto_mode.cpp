#include "app/auto_mode.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "comm/loopback.hpp"
#include "perf/fit.hpp"
#include "perf/stats.hpp"
#include "train/profile.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

namespace acc::app {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Sizes of the link's measurement, floats per rank: from 4 KiB up by 2x until
// plan::link_sizes_enough (a slow link: 128 KiB at 20 Mbit/s, a call of 40-80 ms) or
// 1 MiB (a fast one); the largest kFitSizes are fitted.
constexpr std::int64_t kFirstFloats = 1024, kLastFloats = 262144;
constexpr size_t kFitSizes = 3;
// Timed calls per size: as many as fit in kLinkSeconds, from kMinRepeats to kMaxRepeats.
// A first call of at least kWarmSample is one of them: what warming a path adds is
// nothing next to its transfer on so slow a link.
constexpr int kMinRepeats = 2, kMaxRepeats = 5;
constexpr double kLinkSeconds = 0.05, kWarmSample = 0.01;
// The burst: each size whose call took at most plan::kLongLinkCall back to back is
// timed again after a pause of kPauseFactor x that call, at most kMaxPause (a bucket
// that refills in the time the size takes to send holds at most the size's bytes, so a
// pause as long finds every burst a size can show), kBurstRepeats times. A time
// under kBurstShare of the back-to-back one counts as a burst's saving; above, it is
// a link's noise.
constexpr double kPauseFactor = 1.5, kMaxPause = 0.05, kBurstShare = 0.75;
constexpr int kBurstRepeats = 2;

// Waits for a collective's result on a GPU, so that the clock sees its end.
void wait_for(const at::Tensor& t) {
    if (t.is_cuda()) (void)t.narrow(0, 0, 1).to(at::kCPU);
}

std::string ms(double seconds) { return fmt::format("{:.3g} ms", seconds * 1e3); }

}  // namespace

AutoMode::AutoMode(AutoSettings settings, std::vector<io::Parameter> parameters,
                   std::vector<compress::Spec> candidates, exchange::ExchangeOptions codec_options)
    : settings_(std::move(settings)), parameters_(std::move(parameters)), candidates_(std::move(candidates)),
      codec_options_(std::move(codec_options)) {
    inputs_.parameters = parameters_;
    inputs_.candidates = candidates_;
    inputs_.low = settings_.low;
    inputs_.high = settings_.high;
    inputs_.margin = settings_.margin;
    inputs_.compute.bucket_bytes = settings_.bucket_bytes;
    inputs_.compute.first_bucket_bytes = settings_.first_bucket_bytes;
}

bool AutoMode::due(std::int64_t epoch) const {
    if (!have_measured_) return true;
    if (!std::isfinite(predicted_)) return false;  // the epoch measured the compute: nothing was predicted
    if (!plan::prediction_drifted(predicted_, measured_step_, settings_.drift)) return false;
    const bool affordable = measure_total_ + last_measure_ <= plan::kMeasureShare * trained_seconds_;
    spdlog::info("auto: epoch {} took {} per step against {} predicted: {}", epoch - 1, ms(measured_step_),
                 ms(predicted_),
                 affordable ? "measuring again"
                            : fmt::format("measuring again would take more than {:g} % of the run",
                                          100 * plan::kMeasureShare));
    return affordable;
}

void AutoMode::measure(comm::Collectives& comm, at::Device device, comm::Collectives& host, bool leader,
                       const std::function<ComputeSeconds()>& compute) {
    const auto start = Clock::now();
    measure_link(comm, device, host);
    if (leader) time_codecs();
    // What measuring again costs: the link and the codecs (the compute is measured once,
    // then taken from the epochs themselves).
    const double again = since(start);
    spdlog::debug("auto: link and codecs measured in {:.3f} s", again);
    if (!have_compute_ && compute) {
        const ComputeSeconds c = compute();
        inputs_.compute.seconds = c.forward + c.backward;
        if (c.forward + c.backward > 0) inputs_.compute.backward_share = c.backward / (c.forward + c.backward);
        have_compute_ = true;
    }
    measured_ = true;
    measure_seconds_ = since(start);
    if (have_measured_) measure_total_ += measure_seconds_;  // the first is before any training
    have_measured_ = true;
    last_measure_ = again;
    if (leader) {
        const plan::Link& l = inputs_.link;
        spdlog::info("auto: measured in {:.2f} s: allreduce {} per ring step, {}B/s; allgather {}, {}B/s; "
                     "burst {}; compute {}",
                     measure_seconds_, ms(l.allreduce.alpha), si_count(l.allreduce.bandwidth), ms(l.allgather.alpha),
                     si_count(l.allgather.bandwidth), ms(l.burst_seconds),
                     have_compute_ ? ms(inputs_.compute.seconds) + " per step"
                                   : std::string("from the first epoch's uncompressed steps"));
    }
}

void AutoMode::measure_link(comm::Collectives& comm, at::Device device, comm::Collectives& host) {
    const int world = comm.world_size();
    inputs_.link.world = world;
    if (world < 2) {  // nothing crosses a link
        inputs_.link.allreduce = inputs_.link.allgather = perf::Network(0, 1);
        return;
    }
    const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
    // The slowest rank's value: a collective ends for everyone when the last rank is done.
    auto slowest = [&](double value) {
        at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kDouble));
        host.allreduce(t, comm::ReduceOp::max);
        return t[0].item<double>();
    };
    for (const bool gather : {false, true}) {
        std::vector<double> bytes, seconds;
        for (std::int64_t floats = kFirstFloats;; floats *= 2) {
            at::Tensor t = at::ones({floats}, options);
            auto once = [&] {
                const auto start = Clock::now();
                if (gather) {
                    const auto parts = comm.allgather(t);
                    wait_for(parts.back());
                } else {
                    comm.allreduce(t);
                    wait_for(t);
                }
                return since(start);
            };
            // The first call warms the path and says how many more fit; every rank
            // takes the slowest rank's count, so that all issue the same calls.
            const double first = slowest(once());
            const int repeats = static_cast<int>(
                std::clamp(kLinkSeconds / std::max(first, 1e-9), double{kMinRepeats}, double{kMaxRepeats}));
            std::vector<double> times;
            if (first >= kWarmSample) times.push_back(first);
            while (static_cast<int>(times.size()) < repeats) times.push_back(once());
            // The size nccl-tests gives a collective: allgather's counts every rank's part.
            bytes.push_back(4.0 * static_cast<double>(floats) * (gather ? world : 1));
            seconds.push_back(slowest(perf::summarize(times).median));
            if (plan::link_sizes_enough(seconds, floats >= kLastFloats)) break;
        }
        // The largest sizes alone: a link that lets a burst through (a token bucket)
        // sends the small ones faster than it sustains; the burst's bytes go free in
        // every call and drop out of the slope between two sizes past it.
        const size_t from = bytes.size() > kFitSizes ? bytes.size() - kFitSizes : 0;
        const perf::AlphaBetaFit fit =
            perf::fit_alpha_beta(std::vector<double>(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.end()),
                                 std::vector<double>(seconds.begin() + static_cast<std::ptrdiff_t>(from), seconds.end()));
        const perf::Collective kind = gather ? perf::Collective::allgather : perf::Collective::allreduce;
        (gather ? inputs_.link.allgather : inputs_.link.allreduce) =
            perf::network_from_fit(kind, world, std::max(0.0, fit.alpha), fit.bandwidth);
        // A step's exchange follows its compute, as these calls follow a pause: what a
        // token bucket lets through then is the burst (the sizes are the allreduce's;
        // the bucket is the link's, shared by both collectives).
        if (!gather) inputs_.link.burst_seconds = measure_burst(comm, options, bytes, seconds, slowest);
    }
}

double AutoMode::measure_burst(comm::Collectives& comm, const at::TensorOptions& options,
                               const std::vector<double>& bytes, const std::vector<double>& seconds,
                               const std::function<double(double)>& slowest) {
    double burst = 0;
    for (size_t i = 0; i < bytes.size() && seconds[i] <= plan::kLongLinkCall; ++i) {
        at::Tensor t = at::ones({static_cast<std::int64_t>(bytes[i] / 4)}, options);
        const auto pause = std::chrono::duration<double>(std::min(kMaxPause, kPauseFactor * seconds[i]));
        std::vector<double> times;
        for (int rep = 0; rep < kBurstRepeats; ++rep) {
            std::this_thread::sleep_for(pause);
            const auto start = Clock::now();
            comm.allreduce(t);
            wait_for(t);
            times.push_back(since(start));
        }
        const double after_pause = slowest(perf::summarize(times).median);
        if (after_pause < kBurstShare * seconds[i]) burst = std::max(burst, seconds[i] - after_pause);
    }
    return burst;
}

// Every candidate on every matrix of the model's shapes, on one process standing in for
// the world (comm::LoopbackCollectives): encode and decode per step, the fastest of two,
// shared among the matrices in proportion to their sizes.
void AutoMode::time_codecs() {
    const size_t P = parameters_.size(), C = candidates_.size();
    inputs_.codec_seconds.assign(C, std::vector<double>(P, 0));
    std::int64_t matrix_values = 0;
    for (const auto& p : parameters_)
        if (p.is_matrix()) matrix_values += p.numel();
    if (matrix_values == 0) return;
    comm::LoopbackCollectives loop(std::max(1, inputs_.link.world));
    at::manual_seed(settings_.seed);
    std::vector<at::Tensor> gradients;
    for (const auto& p : parameters_) gradients.push_back(at::randn(p.shape, at::TensorOptions().dtype(at::kFloat)));
    for (size_t c = 0; c < C; ++c) {
        if (candidates_[c] == compress::no_compression()) continue;
        std::vector<compress::Spec> levels;
        for (const auto& p : parameters_) levels.push_back(p.is_matrix() ? candidates_[c] : compress::no_compression());
        exchange::GradientExchange x(parameters_, levels, loop, codec_options_);
        double fastest = std::numeric_limits<double>::infinity();
        for (int rep = 0; rep < 3; ++rep) {
            std::vector<at::Tensor> work;
            for (const auto& g : gradients) work.push_back(g.clone());
            x.step(work);
            if (rep > 0) fastest = std::min(fastest, x.last_step().encode_seconds + x.last_step().decode_seconds);
        }
        for (size_t p = 0; p < P; ++p)
            if (parameters_[p].is_matrix())
                inputs_.codec_seconds[c][p] =
                    fastest * static_cast<double>(parameters_[p].numel()) / static_cast<double>(matrix_values);
    }
}

const plan::AutoPlan& AutoMode::plan(const std::vector<std::uint8_t>& critical) {
    inputs_.critical = critical;
    if (inputs_.critical.size() != parameters_.size()) inputs_.critical.assign(parameters_.size(), 1);
    if (!have_compute_) {
        const size_t none = static_cast<size_t>(
            std::find(candidates_.begin(), candidates_.end(), compress::no_compression()) - candidates_.begin());
        plan_ = plan::AutoPlan();
        plan_.level.assign(parameters_.size(), static_cast<std::int32_t>(none));
        plan_.reason.assign(parameters_.size(), plan::AutoReason::measuring);
        plan_.seconds = plan_.uncompressed_seconds = plan_.compressed_seconds = io::MetricsAuto::kNone;
        plan_.budget = plan_.error = io::MetricsAuto::kNone;
        predicted_ = io::MetricsAuto::kNone;
        return plan_;
    }
    inputs_.uncompressed_overhead = overhead_[0];
    // Until a compressed epoch has run, its overhead is taken to be the uncompressed one.
    inputs_.compressed_overhead = overhead_known_[1] ? overhead_[1] : overhead_[0];
    plan_ = plan::plan_auto(inputs_);
    planned_compute_ = inputs_.compute.seconds;
    overhead_used_ = plan_.pays ? inputs_.compressed_overhead : inputs_.uncompressed_overhead;
    predicted_ = plan_.seconds;
    return plan_;
}

void AutoMode::after_epoch(const std::vector<at::Tensor>& sums, double seconds, double compute_seconds,
                           std::int64_t steps) {
    if (sums.size() != parameters_.size())
        throw Error("internal error: " + std::to_string(sums.size()) + " gradient sums for " +
                    std::to_string(parameters_.size()) + " parameters");
    inputs_.profile.clear();
    for (size_t p = 0; p < parameters_.size(); ++p) inputs_.profile.push_back(train::layer_profile(sums[p], parameters_[p]));
    trained_seconds_ += seconds;
    if (steps > 0) {
        measured_step_ = seconds / static_cast<double>(steps);
        // This epoch's compute, in the run itself: the next plan's, and the one its
        // overhead is measured against (against the compute the plan assumed, a
        // change of compute between epochs would count twice in the next prediction).
        if (std::isfinite(compute_seconds) && compute_seconds > 0) {
            inputs_.compute.seconds = compute_seconds / static_cast<double>(steps);
            have_compute_ = true;
        }
        if (have_compute_) {
            overhead_[plan_.pays ? 1 : 0] = plan::measured_overhead(inputs_, plan_.level, measured_step_);
            overhead_known_[plan_.pays ? 1 : 0] = true;
        }
    }
}

io::MetricsAuto AutoMode::metrics() const {
    io::MetricsAuto m;
    m.pays = plan_.pays ? 1 : 0;
    m.measured = measured_ ? 1 : 0;
    m.measure_seconds = measure_seconds_;
    m.predicted_seconds = predicted_;
    m.overhead_seconds = overhead_used_;
    m.uncompressed_seconds = plan_.uncompressed_seconds;
    m.compressed_seconds = plan_.compressed_seconds;
    m.measured_seconds = measured_step_;
    m.compute_seconds = planned_compute_;
    m.allreduce_alpha = inputs_.link.allreduce.alpha;
    m.allreduce_bandwidth = inputs_.link.allreduce.bandwidth;
    m.allgather_alpha = inputs_.link.allgather.alpha;
    m.allgather_bandwidth = inputs_.link.allgather.bandwidth;
    m.burst_seconds = inputs_.link.burst_seconds;
    m.budget = plan_.budget;
    m.error = plan_.error;
    for (auto r : plan_.reason) m.reason.push_back(static_cast<std::int8_t>(r));
    return m;
}

std::string AutoMode::summary() const {
    if (!plan_.reason.empty() && plan_.reason.front() == plan::AutoReason::measuring)
        return "measuring: the epoch's steps go uncompressed and time the step's compute";
    const std::string compressed =
        std::isfinite(plan_.compressed_seconds) ? ms(plan_.compressed_seconds) : std::string("no plan");
    if (plan_.pays)
        return fmt::format("pays: modelled {} per step vs {} uncompressed", ms(plan_.seconds),
                           ms(plan_.uncompressed_seconds));
    return fmt::format("does not pay: modelled {} vs {} uncompressed per step; sent uncompressed", compressed,
                       ms(plan_.uncompressed_seconds));
}

}  // namespace acc::app
