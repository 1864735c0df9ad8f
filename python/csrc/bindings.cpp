// The toolkit's C++ library as TorchScript custom classes (namespace `accordion`),
// loaded by the Python package with torch.ops.load_library. Custom classes need no
// Python headers, so one source builds against LibTorch 1.13 and 2.x alike. This
// file holds the gradient-statistics files; plan.cpp the schedules and the run plan;
// hook.cpp and gravac.cpp the compressing exchanges, which run over the user's own
// process group.
//
// State is keyed by parameter name (as the model's named_parameters() gives it),
// never by position: DDP rebuilds its buckets after the first step, and a bucket
// names its tensors only through the parameters it holds.
#include "cli/logging.hpp"
#include "compress/device_codec.hpp"
#include "compress/spec.hpp"
#include "guarded.hpp"
#include "parameters.hpp"
#include "io/grads.hpp"
#include "io/output.hpp"

#include <ATen/ATen.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace acc::python {
namespace {

// The library's warnings (spdlog; e.g. a GPU the CUDA kernels were not built for) go to
// stderr as "accordion: warning: ...", never to the script's stdout.
const bool kLogging = (cli::setup_logging("accordion", -1), true);

// The gradient-statistics file of one recording rank (io::GradsWriter), held for
// the whole run like grad-dump's output (io::claim_output).
class GradsFile : public torch::CustomClassHolder {
public:
    // keep_epochs < 0 starts a new file; otherwise the existing one is continued
    // with its first keep_epochs epochs.
    GradsFile(std::string path, std::vector<std::string> names, std::vector<std::int64_t> ndim,
              std::vector<std::int64_t> dims, std::string producer, std::string command_line, std::string model,
              std::string dataset, std::int64_t batch_size, std::int64_t world_size, std::int64_t seed,
              std::int64_t keep_epochs, bool force) {
        guarded([&] {
            std::vector<Parameter> parameters = parameters_of(names, ndim, dims);
            const bool resume = keep_epochs >= 0;
            // A resumed file is an input first: reading it says what is wrong with it.
            claims_ = io::claim_outputs({path}, producer, force || resume);
            if (resume) {
                writer_.emplace(io::GradsWriter::resume(path, std::move(parameters), keep_epochs, false));
            } else {
                io::RunInfo run{model, dataset, batch_size, world_size, seed};
                writer_.emplace(path, Provenance{producer, command_line}, run, std::move(parameters), false);
            }
            return 0;
        });
    }

    // NaN for a statistic not measured (loss, accuracy, test numbers, seconds).
    void append_epoch(double lr, double loss, double accuracy, double test_loss, double test_accuracy,
                      std::int64_t steps, std::int64_t samples, double seconds, std::vector<double> norms) {
        guarded([&] {
            io::EpochStats s;
            s.lr = lr;
            s.loss = loss;
            s.accuracy = accuracy;
            s.test_loss = test_loss;
            s.test_accuracy = test_accuracy;
            s.steps = steps;
            s.samples = samples;
            s.seconds = seconds;
            s.norm = std::move(norms);
            open().append_epoch(s);
            return 0;
        });
    }

    void finish() {
        guarded([&] {
            open().finish();
            return 0;
        });
    }

    // Ends the run's hold on the file; the file stays as written.
    void close() {
        writer_.reset();
        claims_.clear();
    }

    std::int64_t epochs_written() {
        return guarded([&] { return open().epochs_written(); });
    }

private:
    io::GradsWriter& open() {
        if (!writer_) throw UsageError("the gradient-statistics file was closed; make a new recorder to write again");
        return *writer_;
    }

    std::vector<io::OutputClaim> claims_;
    std::optional<io::GradsWriter> writer_;
};

// Per parameter name, the sum of the gradients it is given, as grad-dump's
// recorder keeps it: in the parameter's own dtype and device, its norm taken in
// double precision.
class GradientSums : public torch::CustomClassHolder {
public:
    void add(std::vector<std::string> names, std::vector<at::Tensor> gradients) {
        guarded([&] {
            if (names.size() != gradients.size())
                throw Error("internal error: " + std::to_string(gradients.size()) + " gradients for " +
                            std::to_string(names.size()) + " names");
            at::NoGradGuard no_grad;
            for (size_t i = 0; i < names.size(); ++i) {
                auto it = sums_.find(names[i]);
                if (it == sums_.end())
                    it = sums_.emplace(names[i], at::zeros_like(gradients[i], at::MemoryFormat::Contiguous)).first;
                else if (!it->second.sizes().equals(gradients[i].sizes()))
                    throw Error("internal error: the gradient of '" + names[i] + "' changed shape");
                it->second.add_(gradients[i]);
            }
            return 0;
        });
    }

    // Parameters never given a gradient since reset() have a zero sum.
    std::vector<double> norms(std::vector<std::string> names) {
        std::vector<double> out;
        out.reserve(names.size());
        for (const auto& name : names) {
            auto it = sums_.find(name);
            out.push_back(it == sums_.end() ? 0.0 : it->second.to(at::kDouble).norm().item<double>());
        }
        return out;
    }

    at::Tensor sum(std::string name) {
        return guarded([&] {
            auto it = sums_.find(name);
            if (it == sums_.end()) throw UsageError("no gradient of '" + name + "' was recorded since the last reset");
            return it->second;
        });
    }

    void reset() {
        for (auto& entry : sums_) entry.second.zero_();
    }

private:
    std::map<std::string, at::Tensor> sums_;
};

}  // namespace
}  // namespace acc::python

TORCH_LIBRARY(accordion, m) {
    using namespace acc::python;
    m.class_<GradsFile>("GradsFile")
        .def(torch::init<std::string, std::vector<std::string>, std::vector<std::int64_t>, std::vector<std::int64_t>,
                         std::string, std::string, std::string, std::string, std::int64_t, std::int64_t, std::int64_t,
                         std::int64_t, bool>())
        .def("append_epoch", &GradsFile::append_epoch)
        .def("finish", &GradsFile::finish)
        .def("close", &GradsFile::close)
        .def("epochs_written", &GradsFile::epochs_written);
    m.class_<GradientSums>("GradientSums")
        .def(torch::init<>())
        .def("add", &GradientSums::add)
        .def("norms", &GradientSums::norms)
        .def("sum", &GradientSums::sum)
        .def("reset", &GradientSums::reset);
    // The GPU architectures of the toolkit's CUDA kernels in this library; empty without them.
    m.def("cuda_kernels() -> str", [] { return acc::compress::device::cuda_kernels_built(); });
    // No compression, and Accordion's default low and high levels: the package's defaults are the programs'.
    m.def("default_levels() -> str[]", [] {
        return std::vector<std::string>{acc::compress::no_compression().text(), acc::compress::kDefaultLow.text(),
                                        acc::compress::kDefaultHigh.text()};
    });
}
