// Parity with what users run today, through Debian's python3-torch: PowerSGD against
// PyTorch's own powerSGD_hook on Gloo ranks (same inputs, same seed, hence the same
// initial Q), top-k and QSGD against references written with torch operations.
// Data goes through HDF5 files; tests/unit/compress_reference.py computes the references.
#include "compress/codecs.hpp"
#include "compress/kernels.hpp"
#include "exchange/gradient_exchange.hpp"
#include "io/h5.hpp"
#include "support/thread_collectives.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>

using namespace acc::compress;
using namespace acc::exchange;
namespace fs = std::filesystem;

namespace {

const std::string kPython = ACC_PYTHON;
const std::string kScript = std::string(ACC_SOURCE_DIR) + "/tests/unit/compress_reference.py";

class ParityTest : public ::testing::Test {
protected:
    void SetUp() override {
        std::string probe = "'" + kPython + "' -c 'import torch, h5py' >/dev/null 2>&1";
        if (std::system(probe.c_str()) != 0)
            GTEST_SKIP() << kPython << " cannot import torch and h5py (install python3-torch and python3-h5py)";
        std::string pattern = (fs::temp_directory_path() / "acc-parity-XXXXXX").string();
        dir_ = mkdtemp(pattern.data());
    }
    void TearDown() override {
        if (!dir_.empty()) fs::remove_all(dir_);
    }
    std::string file(const std::string& name) const { return (fs::path(dir_) / name).string(); }
    void reference(const std::string& mode, const std::string& in, const std::string& out) const {
        std::string command = "timeout 300 '" + kPython + "' '" + kScript + "' " + mode + " '" + in + "' '" + out + "'";
        ASSERT_EQ(std::system(command.c_str()), 0) << command;
    }

    std::string dir_;
};

at::Tensor random_tensor(const std::vector<std::int64_t>& shape, std::uint64_t seed) {
    return at::randn(shape, at::make_generator<at::CPUGeneratorImpl>(seed));
}

void write_tensor(acc::io::H5File& f, const std::string& name, const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    std::vector<float> v(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
    acc::io::Dims dims;
    for (auto d : c.sizes()) dims.push_back(static_cast<hsize_t>(d));
    if (dims.empty()) dims.push_back(1);
    f.write(name, v, dims);
}

at::Tensor read_tensor(const acc::io::H5File& f, const std::string& name) {
    std::vector<float> v = f.read<float>(name);
    return at::tensor(v, at::kFloat);
}

double relative(const at::Tensor& got, const at::Tensor& want) {
    double scale = want.norm().item<double>();
    return (got.reshape(-1) - want.reshape(-1)).norm().item<double>() / (scale > 0 ? scale : 1.0);
}

// Two conv weights of one shape around a matrix of another: the hook walks them grouped by shape.
std::vector<TensorInfo> parity_model() {
    return {{"conv1.weight", {16, 8, 3, 3}}, {"conv1.bias", {16}},      {"mid.weight", {12, 20}},
            {"conv2.weight", {16, 8, 3, 3}}, {"fc.weight", {10, 144}}, {"fc.bias", {10}},
            {"tiny.weight", {3, 2}}};
}

struct PowerSgdConfig {
    int rank;
    std::uint32_t seed;
};

}  // namespace

TEST_F(ParityTest, PowerSgdMatchesPyTorchsHook) {
    const int steps = 3;
    const auto tensors = parity_model();
    const auto count = static_cast<std::int64_t>(tensors.size());
    for (int world : {2, 3}) {
        std::vector<PowerSgdConfig> configs =
            world == 2 ? std::vector<PowerSgdConfig>{{1, 0}, {4, 7}} : std::vector<PowerSgdConfig>{{2, 0}};
        auto grad = [&](size_t c, int r, int s, std::int64_t i) {
            return random_tensor(tensors[static_cast<size_t>(i)].shape, 100000 * c + 1000 * r + 10 * s + i);
        };
        const std::string in = file("psgd-in.h5"), out = file("psgd-out");
        {
            auto f = acc::io::H5File::create(in, in);
            f.write_attr("/", "world", std::int64_t{world});
            f.write_attr("/", "configs", static_cast<std::int64_t>(configs.size()));
            for (size_t c = 0; c < configs.size(); ++c) {
                std::string g = "/config" + std::to_string(c);
                for (int r = 0; r < world; ++r)
                    for (int s = 0; s < steps; ++s)
                        for (std::int64_t i = 0; i < count; ++i)
                            write_tensor(f, g + "/rank" + std::to_string(r) + "/step" + std::to_string(s) + "/t" +
                                                std::to_string(i),
                                         grad(c, r, s, i));
                f.write_attr(g, "rank", std::int64_t{configs[c].rank});
                f.write_attr(g, "seed", std::int64_t{configs[c].seed});
                f.write_attr(g, "steps", std::int64_t{steps});
                f.write_attr(g, "tensors", count);
            }
            f.close();
        }
        reference("powersgd", in, out);

        for (size_t c = 0; c < configs.size(); ++c) {
            const Spec level = parse_spec("powersgd:" + std::to_string(configs[c].rank));
            std::vector<std::vector<at::Tensor>> results(static_cast<size_t>(world * steps));
            std::vector<std::map<std::string, at::Tensor>> states(static_cast<size_t>(world));
            acc::test::ThreadGroup group(world, 60);
            group.run([&](int r, acc::comm::Collectives& comm) {
                ExchangeOptions options;
                options.seed = configs[c].seed;
                GradientExchange x(tensors, std::vector<Spec>(tensors.size(), level), comm, options);
                for (int s = 0; s < steps; ++s) {
                    std::vector<at::Tensor> g;
                    for (std::int64_t i = 0; i < count; ++i) g.push_back(grad(c, r, s, i));
                    x.step(g);
                    results[static_cast<size_t>(r * steps + s)] = g;
                }
                for (auto& [name, t] : x.state()) states[static_cast<size_t>(r)][name] = t;
            });

            for (int r = 0; r < world; ++r) {
                auto ref = acc::io::H5File::open(out + std::to_string(r) + ".h5", false);
                const std::string g = "/config" + std::to_string(c);
                // The seed sequence: numpy's RandomState, reproduced.
                std::vector<std::int64_t> seeds = ref.read<std::int64_t>(g + "/seeds");
                kernels::NumpyRandomState rng(configs[c].seed);
                for (auto want : seeds) EXPECT_EQ(rng.randint(1000000000), want);
                for (int s = 0; s < steps; ++s) {
                    at::Tensor want = read_tensor(ref, g + "/step" + std::to_string(s));
                    const auto& got = results[static_cast<size_t>(r * steps + s)];
                    std::int64_t offset = 0;
                    for (std::int64_t i = 0; i < count; ++i) {
                        std::int64_t n = got[static_cast<size_t>(i)].numel();
                        EXPECT_LT(relative(got[static_cast<size_t>(i)], want.narrow(0, offset, n)), 1e-5)
                            << "W " << world << " rank " << configs[c].rank << " worker " << r << " step " << s << " "
                            << tensors[static_cast<size_t>(i)].name;
                        offset += n;
                    }
                }
                // Error feedback memory, uncompressed tensors included (local minus mean).
                at::Tensor error = read_tensor(ref, g + "/error");
                std::int64_t offset = 0;
                for (const auto& t : tensors) {
                    at::Tensor mine = states[static_cast<size_t>(r)].at(t.name + "/error");
                    EXPECT_LT(relative(mine, error.narrow(0, offset, t.numel())), 1e-5) << "error of " << t.name;
                    offset += t.numel();
                }
                // The warm-start Qs, in the hook's order: grouped by matrix shape.
                at::Tensor q = read_tensor(ref, g + "/q");
                std::vector<std::pair<std::int64_t, std::int64_t>> order;
                std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::string>> groups;
                for (const auto& t : tensors) {
                    if (!powersgd_compresses(t.shape, configs[c].rank)) continue;
                    MatrixView m = matrix_view(t.shape);
                    auto key = std::make_pair(m.rows, m.cols);
                    if (!groups.count(key)) order.push_back(key);
                    groups[key].push_back(t.name);
                }
                offset = 0;
                for (const auto& key : order)
                    for (const auto& name : groups[key]) {
                        at::Tensor mine = states[static_cast<size_t>(r)].at(name + "/powersgd_q");
                        EXPECT_LT(relative(mine, q.narrow(0, offset, mine.numel())), 1e-5) << "Q of " << name;
                        offset += mine.numel();
                    }
                EXPECT_EQ(offset, q.numel());
            }
        }
    }
}

TEST_F(ParityTest, TopKMatchesTorchOperations) {
    const int world = 2, steps = 3;
    const double fraction = 0.1;
    std::vector<TensorInfo> tensors = {{"a", {50, 40}}, {"b", {30}}, {"c", {7, 7, 3}}};
    auto grad = [&](int r, int s, size_t i) { return random_tensor(tensors[i].shape, 1000 * r + 10 * s + i); };
    const std::string in = file("topk-in.h5"), out = file("topk-out.h5");
    {
        auto f = acc::io::H5File::create(in, in);
        f.write_attr("/", "world", std::int64_t{world});
        f.write_attr("/", "steps", std::int64_t{steps});
        f.write_attr("/", "tensors", static_cast<std::int64_t>(tensors.size()));
        f.write_attr("/", "fraction", fraction);
        for (int r = 0; r < world; ++r)
            for (int s = 0; s < steps; ++s)
                for (size_t i = 0; i < tensors.size(); ++i)
                    write_tensor(f, "/rank" + std::to_string(r) + "/step" + std::to_string(s) + "/t" + std::to_string(i),
                                 grad(r, s, i));
        f.close();
    }
    reference("topk", in, out);
    std::vector<std::vector<at::Tensor>> results(static_cast<size_t>(steps));
    std::vector<std::map<std::string, at::Tensor>> states(static_cast<size_t>(world));
    acc::test::ThreadGroup group(world, 60);
    group.run([&](int r, acc::comm::Collectives& comm) {
        GradientExchange x(tensors, std::vector<Spec>(tensors.size(), parse_spec("topk:0.1")), comm);
        for (int s = 0; s < steps; ++s) {
            std::vector<at::Tensor> g;
            for (size_t i = 0; i < tensors.size(); ++i) g.push_back(grad(r, s, i));
            x.step(g);
            if (r == 0) results[static_cast<size_t>(s)] = g;
        }
        for (auto& [name, t] : x.state()) states[static_cast<size_t>(r)][name] = t;
    });
    auto ref = acc::io::H5File::open(out, false);
    for (int s = 0; s < steps; ++s)
        for (size_t i = 0; i < tensors.size(); ++i)
            EXPECT_LT(relative(results[static_cast<size_t>(s)][i],
                               read_tensor(ref, "/step" + std::to_string(s) + "/t" + std::to_string(i))),
                      1e-6)
                << "step " << s << " " << tensors[i].name;
    for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < tensors.size(); ++i)
            EXPECT_LT(relative(states[static_cast<size_t>(r)].at(tensors[i].name + "/error"),
                               read_tensor(ref, "/rank" + std::to_string(r) + "/error" + std::to_string(i))),
                      1e-6)
                << "error of " << tensors[i].name << " on worker " << r;
}

TEST_F(ParityTest, QsgdMatchesTorchOperations) {
    const int world = 3;
    const std::int64_t n = 1000;  // not a whole number of buckets
    for (int levels : {5, 300}) {
        const Spec spec = parse_spec("qsgd:" + std::to_string(levels));
        std::vector<std::vector<std::uint8_t>> payloads;
        const std::string in = file("qsgd-in.h5"), out = file("qsgd-out.h5");
        {
            auto f = acc::io::H5File::create(in, in);
            f.write_attr("/", "world", std::int64_t{world});
            f.write_attr("/", "levels", std::int64_t{levels});
            for (int r = 0; r < world; ++r) {
                at::Tensor x = random_tensor({n}, 500 + r);
                x.narrow(0, 256, 128).zero_();  // a zero bucket
                auto key = kernels::stream_key(0, 3, 1, static_cast<std::uint64_t>(r));
                auto codec = make_gather_codec(spec, n, {});
                payloads.emplace_back(static_cast<size_t>(codec->payload_bytes()));
                ASSERT_TRUE(codec->encode(x.data_ptr<float>(), false, key, payloads.back().data()));
                std::vector<float> u(static_cast<size_t>(n));
                for (std::int64_t i = 0; i < n; ++i) u[static_cast<size_t>(i)] = kernels::uniform_at(key, i);
                write_tensor(f, "/rank" + std::to_string(r) + "/x", x);
                f.write("/rank" + std::to_string(r) + "/u", u, {static_cast<hsize_t>(n)});
            }
            f.close();
        }
        reference("qsgd", in, out);
        auto ref = acc::io::H5File::open(out, false);
        const std::int64_t buckets = (n + 127) / 128;
        for (int r = 0; r < world; ++r) {
            const std::uint8_t* p = payloads[static_cast<size_t>(r)].data();
            std::vector<float> norms = ref.read<float>("/rank" + std::to_string(r) + "/norms");
            std::vector<std::int32_t> codes = ref.read<std::int32_t>("/rank" + std::to_string(r) + "/codes");
            ASSERT_EQ(static_cast<std::int64_t>(norms.size()), buckets);
            for (std::int64_t b = 0; b < buckets; ++b)
                EXPECT_NEAR(kernels::load_f32(p + 4 * b), norms[static_cast<size_t>(b)], 1e-6 * norms[static_cast<size_t>(b)]);
            int mismatched = 0;
            for (std::int64_t i = 0; i < n; ++i) {
                int mine = levels < 128 ? static_cast<std::int8_t>(p[4 * buckets + i])
                                        : static_cast<std::int16_t>(p[4 * buckets + 2 * i] | (p[4 * buckets + 2 * i + 1] << 8));
                mismatched += mine != codes[static_cast<size_t>(i)];
            }
            EXPECT_EQ(mismatched, 0) << "levels " << levels << " worker " << r;
        }
        auto codec = make_gather_codec(spec, n, {});
        std::vector<float> mean(static_cast<size_t>(n));
        ASSERT_TRUE(codec->decode({payloads[0].data(), payloads[1].data(), payloads[2].data()}, mean.data()));
        EXPECT_LT(relative(at::tensor(mean), read_tensor(ref, "/mean")), 1e-6) << "levels " << levels;
    }
}
