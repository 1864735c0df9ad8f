#include "app/rank_session.hpp"

#include "app/same_settings.hpp"

#include "base/error.hpp"
#include "base/text.hpp"
#include "exchange/staging.hpp"
#include "exchange/trainer/state.hpp"
#include "io/h5.hpp"
#include "train/config.hpp"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <iterator>

namespace acc::app {
namespace {

std::vector<std::uint8_t> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FileError(path, "cannot be read");
    return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string hex(std::int64_t value) { return fmt::format("{:016x}", static_cast<std::uint64_t>(value)); }

}  // namespace

RankSession::RankSession(comm::Collectives* comm, torch::Device device)
    : comm_(comm),
      device_(device),
      host_(comm && !device.is_cpu() ? exchange::staged_collectives(*comm, device) : nullptr),
      rank_(comm ? comm->rank() : 0),
      world_(comm ? comm->world_size() : 1) {}

RankSession::~RankSession() = default;

void RankSession::check_same_options(const std::string& settings) {
    if (!comm_) return;
    check_same_settings(*host(), settings, "options",
                        "; every rank needs the same model, data, training and communication options");
}

void RankSession::broadcast_from_leader(const std::vector<torch::Tensor>& tensors) {
    if (!comm_) return;
    torch::NoGradGuard no_grad;
    for (const auto& tensor : tensors) {
        // Host backends (Gloo) get host tensors; a staged one takes them where they are.
        torch::Tensor t = host_ ? tensor.detach().contiguous() : tensor.detach().to(torch::kCPU).contiguous();
        host()->broadcast(t, 0);
        if (t.data_ptr() != tensor.data_ptr()) tensor.copy_(t);
    }
}

void RankSession::check_same_weights(const std::vector<torch::Tensor>& weights, const std::string& what,
                                     std::int64_t epoch, std::int64_t step) {
    const std::uint64_t mine = train::checksum(weights);
    spdlog::debug("rank {}: {} after epoch {} (step {}): checksum {:016x}", rank_, what, epoch, step, mine);
    const auto all = gather(static_cast<std::int64_t>(mine));
    for (int other = 1; other < world_; ++other)
        if (all[static_cast<size_t>(other)] != all[0])
            throw Error("after epoch " + std::to_string(epoch) + " rank " + std::to_string(other) +
                        " holds other weights than rank 0 (checksums " + hex(all[static_cast<size_t>(other)]) +
                        " and " + hex(all[0]) + "); the ranks no longer train one model");
}

std::vector<double> RankSession::sum(const std::vector<double>& values) {
    if (!comm_) return values;
    torch::Tensor t = torch::tensor(values, torch::kFloat64);
    host()->allreduce(t, comm::ReduceOp::sum);
    return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::vector<double> RankSession::broadcast(std::vector<double> values, size_t count) {
    values.resize(count);
    if (!comm_) return values;
    torch::Tensor t = torch::tensor(values, torch::kFloat64);
    host()->broadcast(t, 0);
    return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::vector<std::int32_t> RankSession::broadcast(std::vector<std::int32_t> values, size_t count) {
    values.resize(count);
    if (!comm_) return values;
    torch::Tensor t = torch::tensor(std::vector<std::int64_t>(values.begin(), values.end()), torch::kLong);
    host()->broadcast(t, 0);
    return std::vector<std::int32_t>(t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + t.numel());
}

std::vector<std::int64_t> RankSession::gather(std::int64_t value) {
    if (!comm_) return {value};
    std::vector<std::int64_t> out;
    for (const auto& part : host()->allgather(torch::tensor(std::vector<std::int64_t>{value}, torch::kLong)))
        out.push_back(part.item<std::int64_t>());
    return out;
}

std::string RankSession::broadcast(const std::string& text) {
    if (!comm_) return text;
    const auto bytes = exchange::broadcast_bytes(*host(), std::vector<std::uint8_t>(text.begin(), text.end()), 0);
    return std::string(bytes.begin(), bytes.end());
}

std::vector<std::uint8_t> RankSession::checkpoint_image(const std::string& path) {
    std::vector<std::uint8_t> image = leader() ? read_file(path) : std::vector<std::uint8_t>();
    return comm_ ? exchange::broadcast_bytes(*host(), std::move(image), 0) : image;
}

torch::Tensor text_tensor(const std::string& text) {
    return torch::tensor(std::vector<std::int64_t>(text.begin(), text.end()), torch::kLong).to(torch::kUInt8);
}

std::string tensor_text(const torch::Tensor& tensor) {
    torch::Tensor c = tensor.to(torch::kCPU, torch::kUInt8).contiguous();
    return std::string(reinterpret_cast<const char*>(c.data_ptr<std::uint8_t>()), static_cast<size_t>(c.numel()));
}

std::string recorded_options(const std::vector<std::uint8_t>& image, const std::string& path) {
    try {
        const io::H5File f = io::H5File::open_image(image, path);
        if (!f.exists("/extra") || !f.exists("/extra/run") || !f.exists("/extra/run/options")) return "";
        const auto bytes = f.read<std::uint8_t>("/extra/run/options");
        return std::string(bytes.begin(), bytes.end());
    } catch (const Error&) {
        return "";
    }
}

void check_same_run(const std::string& path, const std::string& recorded, const std::string& now,
                    const std::vector<SameRunSetting>& settings) {
    // Every difference at once: a user who fixes one should not meet the next on the next try.
    std::vector<std::string> changed;
    if (!recorded.empty()) changed = train::changed_settings(recorded, now);
    for (const auto& s : settings)
        if (s.then != s.now) {
            const std::string line = s.what + " " + s.then + ", not " + s.now;
            if (std::find(changed.begin(), changed.end(), line) == changed.end()) changed.push_back(line);
        }
    if (!changed.empty())
        throw UsageError("--resume: " + path + " is from a run with " + join(changed, "; ") +
                         "; resume with the options of the original run");
}

}  // namespace acc::app
