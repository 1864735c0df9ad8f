// lib/train with LibTorch: models (names and sizes pinned), datasets, the
// optimizer against LibTorch's own SGD, the recorder, the exchange hook,
// micro-batches, checkpoints, determinism, and the timing of a step's compute.
#include "base/error.hpp"
#include "compress/shapes.hpp"
#include "io/grads.hpp"
#include "io/h5.hpp"
#include "train/compute_time.hpp"
#include "train/datasets.hpp"
#include "train/models.hpp"
#include "train/trainer.hpp"

#include "support/tiny_synthetic.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace acc::train;
using acc::test::error_of;
using acc::test::TempDir;
using acc::test::tiny_synthetic;

namespace {

std::int64_t count_values(const torch::nn::Module& m) {
    std::int64_t n = 0;
    for (const auto& p : m.parameters()) n += p.numel();
    return n;
}

std::vector<std::string> names(const torch::nn::Module& m) {
    std::vector<std::string> out;
    for (const auto& p : describe_parameters(m)) out.push_back(p.name);
    return out;
}

const DataShape kCifar{{3, 32, 32}, 10};
const DataShape kFashion{{1, 28, 28}, 10};

TrainerOptions plain_sgd(std::int64_t batch = 32) {
    TrainerOptions o;
    o.batch_size = batch;
    o.optimizer = {0, false, 0};
    return o;
}

bool same_parameters(Model& a, Model& b) {
    auto pa = a.parameters(), pb = b.parameters();
    for (size_t i = 0; i < pa.size(); ++i)
        if (!torch::equal(pa[i], pb[i])) return false;
    return true;
}

}  // namespace

// A CPU run seeds the CPU's generator alone, to the same stream as torch::manual_seed.
TEST(Seeding, TheCpusGeneratorAsTorchManualSeedDoes) {
    seed_generators(11, torch::kCPU);
    const torch::Tensor ours = torch::randn({16});
    torch::manual_seed(11);
    const torch::Tensor torchs = torch::randn({16});
    EXPECT_TRUE(torch::equal(ours, torchs));
    seed_generators(12, torch::kCPU);
    EXPECT_FALSE(torch::equal(torch::randn({16}), torchs));
}

TEST(Models, ResNet18MatchesThePaperAndSynthGrads) {
    torch::manual_seed(0);
    auto model = make_model("resnet18", kCifar, {});
    auto params = describe_parameters(*model);
    EXPECT_EQ(params.size(), 62u);
    EXPECT_EQ(count_values(*model), 11173962);
    // examples/synth_grads.py lists the CIFAR ResNet-18 with h5py; ours must be identical.
    TempDir dir;
    const std::string file = dir.file("resnet-names.h5");
    const std::string command =
        std::string(ACC_TEST_PYTHON) + " " + ACC_TEST_SOURCE_DIR + "/examples/synth_grads.py --epochs 1 -o " + file;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
    auto reference = acc::io::read_grads(file).parameters;
    fs::remove(file);
    EXPECT_EQ(acc::io::compare_parameters(reference, params), "");
    EXPECT_EQ(params[0].name, "conv1.weight");
    EXPECT_EQ(params[21].name, "layer2.0.shortcut.0.weight");
    EXPECT_EQ(params[61].name, "linear.bias");
    auto out = model->forward(torch::randn({2, 3, 32, 32}));
    EXPECT_EQ(out.sizes(), (std::vector<std::int64_t>{2, 10}));
}

TEST(Models, InputShapeAndClassesComeFromTheData) {
    auto resnet = make_model("resnet18", {{1, 28, 28}, 7}, {});
    EXPECT_EQ(count_values(*resnet), 11173962 - 64 * 2 * 9 - 3 * 513);  // one input channel, 7 classes
    EXPECT_EQ(resnet->forward(torch::randn({2, 1, 28, 28})).sizes(), (std::vector<std::int64_t>{2, 7}));
    auto mlp = make_model("mlp", kFashion, {});
    EXPECT_EQ(count_values(*mlp), 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10);
    EXPECT_EQ(names(*mlp),
              (std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "fc3.weight", "fc3.bias"}));
    ModelOptions narrow;
    narrow.hidden_size = 16;
    EXPECT_EQ(count_values(*make_model("mlp", {{1, 8, 8}, 4}, narrow)), 64 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4);
    auto cnn = make_model("cnn", kFashion, {});
    EXPECT_EQ(count_values(*cnn), 1199882);  // PyTorch's MNIST example without dropout
    EXPECT_EQ(names(*cnn), (std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                                     "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}));
    EXPECT_EQ(cnn->forward(torch::randn({3, 1, 28, 28})).sizes(), (std::vector<std::int64_t>{3, 10}));
}

TEST(Models, Vgg19Bn) {
    auto vgg = make_model("vgg19_bn", kCifar, {});
    auto n = names(*vgg);
    EXPECT_EQ(n.size(), 66u);
    EXPECT_EQ(count_values(*vgg), 20040522);  // as PyTorch counts the CIFAR VGG-19 with batch norm
    EXPECT_EQ(n[0], "features.0.weight");
    EXPECT_EQ(n[3], "features.1.bias");
    EXPECT_EQ(n[4], "features.3.weight");  // index 2 is a ReLU, 6 a max-pool
    EXPECT_EQ(n[63], "features.50.bias");
    EXPECT_EQ(n[64], "classifier.weight");
    EXPECT_EQ(vgg->forward(torch::randn({2, 3, 32, 32})).sizes(), (std::vector<std::int64_t>{2, 10}));
    // 28x28 images reach 1x1 after four pools; the fifth is left out.
    auto small = make_model("vgg19_bn", kFashion, {});
    EXPECT_EQ(small->forward(torch::randn({2, 1, 28, 28})).sizes(), (std::vector<std::int64_t>{2, 10}));
    EXPECT_EQ(names(*small), n);
}

TEST(Models, LstmLanguageModel) {
    ModelOptions o;
    o.embedding_size = 16;
    o.hidden_size = 16;
    const DataShape text{{}, 100};
    auto untied = make_model("lstm", text, o);
    // PyTorch: nn.Embedding(100, 16), nn.LSTM(16, 16, 2), nn.Linear(16, 100).
    EXPECT_EQ(count_values(*untied), 7652);
    EXPECT_EQ(names(*untied),
              (std::vector<std::string>{"encoder.weight", "rnn.weight_ih_l0", "rnn.weight_hh_l0", "rnn.bias_ih_l0",
                                        "rnn.bias_hh_l0", "rnn.weight_ih_l1", "rnn.weight_hh_l1", "rnn.bias_ih_l1",
                                        "rnn.bias_hh_l1", "decoder.weight", "decoder.bias"}));
    o.tied = true;
    auto tied = make_model("lstm", text, o);
    EXPECT_EQ(count_values(*tied), 6052);  // the decoder's weight is the embedding's
    EXPECT_EQ(names(*tied).back(), "decoder.bias");
    EXPECT_EQ(names(*tied).size(), 10u);
    auto logits = tied->forward(torch::randint(0, 100, {5, 3}, torch::kInt64));
    EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{15, 100}));
    o.embedding_size = 8;
    EXPECT_CONTAINS(error_of([&] { make_model("lstm", text, o); }),
                    "--tied: needs --embedding-size equal to --hidden-size (now 8 and 16)");
    EXPECT_CONTAINS(error_of([&] { make_model("lstm", kFashion, {}); }), "--model lstm: needs a text dataset");
    EXPECT_CONTAINS(error_of([&] {
                        make_model("cnn", {{1, 4, 4}, 10}, {});
                    }),
                    "--model cnn: needs images of at least 6x6 pixels, not 4x4");
    EXPECT_CONTAINS(error_of([&] { make_model("mlp", text, {}); }), "needs an image dataset");
}

TEST(Datasets, NormalizationAndOrder) {
    ImageSet train, test;
    train.count = 6;
    train.channels = 1;
    train.height = train.width = 2;
    for (int i = 0; i < 6; ++i) {
        for (int j = 0; j < 4; ++j) train.pixels.push_back(static_cast<std::uint8_t>(40 * i + j));
        train.labels.push_back(i % 3);
    }
    test = train;
    auto data = make_image_dataset("toy", "toy", train, test, 3, {{0.5f}, {0.25f}}, false);
    EXPECT_EQ(data->info().shape.input, (std::vector<std::int64_t>{1, 2, 2}));
    auto batches = data->train(2, {}, 4, 9);
    ASSERT_EQ(batches->size(), 2);  // 4 + 2
    auto order = shard_order(6, 2, 9, {});
    for (std::int64_t b = 0; b < 2; ++b) {
        Batch batch = batches->get(b);
        for (std::int64_t k = 0; k < batch.samples; ++k) {
            const std::int64_t i = order[b * 4 + k];
            EXPECT_EQ(batch.target[k].item<std::int64_t>(), i % 3);
            const float expected = (static_cast<float>(40 * i + 3) / 255.0f - 0.5f) / 0.25f;
            EXPECT_FLOAT_EQ(batch.input[k][0][1][1].item<float>(), expected);
        }
    }
}

TEST(Datasets, CifarAugmentationIsAPaddedCropAndFlip) {
    ImageSet train;
    train.count = 64;
    train.channels = 3;
    train.height = train.width = 32;
    torch::manual_seed(5);
    auto pixels = torch::randint(1, 256, {64, 3, 32, 32}, torch::kUInt8);
    train.pixels.assign(pixels.data_ptr<std::uint8_t>(), pixels.data_ptr<std::uint8_t>() + pixels.numel());
    train.labels.assign(64, 0);
    for (int i = 0; i < 64; ++i) train.labels[i] = i % 10;
    auto data = make_image_dataset("cifar", "x", train, train, 10, {}, true);
    auto batch = data->train(0, {}, 64, 1)->get(0);
    auto order = shard_order(64, 0, 1, {});
    auto padded = torch::constant_pad_nd(pixels, {4, 4, 4, 4}, 0).to(torch::kFloat32).div(255);
    int flips = 0, moved = 0;
    for (int k = 0; k < 64; ++k) {
        auto source = padded[order[k]];
        bool found = false;
        for (int dy = 0; dy <= 8 && !found; ++dy)
            for (int dx = 0; dx <= 8 && !found; ++dx)
                for (int flip = 0; flip < 2 && !found; ++flip) {
                    auto crop = source.slice(1, dy, dy + 32).slice(2, dx, dx + 32);
                    if (flip) crop = crop.flip({2});
                    if (torch::equal(crop, batch.input[k])) {
                        found = true;
                        flips += flip;
                        moved += dy != 4 || dx != 4;
                    }
                }
        EXPECT_TRUE(found) << "sample " << k << " is not a crop of its padded image";
    }
    EXPECT_GT(flips, 16);
    EXPECT_LT(flips, 48);
    EXPECT_GT(moved, 48);
    // The test split is not augmented.
    EXPECT_TRUE(torch::equal(data->test(8)->get(0).input, pixels.slice(0, 0, 8).to(torch::kFloat32).div(255)));
}

TEST(Datasets, TextStreamsAndShards) {
    std::vector<std::string> train, test = {"w1", "w2", "unseen", "w3"};
    for (int i = 0; i < 40; ++i) train.push_back("w" + std::to_string(i));  // ids equal to positions
    auto data = make_text_dataset("wikitext2", "x", train, test, 3);
    EXPECT_EQ(data->info().shape.classes, 41);  // 40 words and <unk>
    // 2 ranks x 4 streams: 8 columns of 5 tokens; column s holds tokens 5s .. 5s+4.
    auto rank1 = data->train(0, {1, 2}, 4, 0);
    EXPECT_EQ(rank1->size(), 2);  // 4 inputs per stream: 3 + 1
    Batch first = rank1->get(0);
    EXPECT_EQ(first.input.sizes(), (std::vector<std::int64_t>{3, 4}));
    EXPECT_EQ(first.samples, 12);
    for (int t = 0; t < 3; ++t)
        for (int s = 0; s < 4; ++s) {
            EXPECT_EQ(first.input[t][s].item<std::int64_t>(), 5 * (4 + s) + t);
            EXPECT_EQ(first.target[t * 4 + s].item<std::int64_t>(), 5 * (4 + s) + t + 1);
        }
    EXPECT_EQ(rank1->get(1).input.sizes(), (std::vector<std::int64_t>{1, 4}));
    EXPECT_EQ(data->test(2)->get(0).input[0][1].item<std::int64_t>(), 40);  // streams "w1 w2", "unseen w3": <unk> is 40
    EXPECT_CONTAINS(error_of([&] {
                        data->train(0, {0, 1}, 30, 0);
                    }),
                    "the training split holds 40 tokens, too few for 30 streams");
}

TEST(Datasets, SyntheticIsSeeded) {
    auto a = tiny_synthetic(), b = tiny_synthetic();
    auto ba = a->train(0, {}, 16, 1)->get(0), bb = b->train(0, {}, 16, 1)->get(0);
    EXPECT_TRUE(torch::equal(ba.input, bb.input));
    EXPECT_TRUE(torch::equal(ba.target, bb.target));
    SyntheticOptions o;
    o.shape = {1, 8, 8};
    auto other = make_synthetic(o, 4)->train(0, {}, 16, 1)->get(0);
    EXPECT_FALSE(torch::equal(ba.input, other.input));
}

TEST(Datasets, OpenNamesMissingPieces) {
    // A missing directory of the test's own: a fixed path such as /nonexistent
    // may exist on some machine (a program run there creates its outputs' parents).
    TempDir dir;
    const std::string missing = dir.file("missing");
    DataConfig c;
    c.name = "cifar10";
    EXPECT_CONTAINS(error_of([&] { open_dataset(c, 1); }), "--data-dir: dataset cifar10 has no default location");
    c.dir = missing;
    EXPECT_CONTAINS(error_of([&] { open_dataset(c, 1); }), missing + "/data_batch_1.bin: no such file");
    c.name = "fashion-mnist";
    EXPECT_CONTAINS(error_of([&] { open_dataset(c, 1); }), missing + ": no such directory (expected Fashion-MNIST's");
    c.name = "wikitext2";
    EXPECT_CONTAINS(error_of([&] { open_dataset(c, 1); }), missing + "/wiki.train.tokens: cannot open");
}

TEST(Sgd, MatchesLibTorchsOwnSgd) {
    for (bool nesterov : {false, true})
        for (double decay : {0.0, 0.01}) {
            torch::manual_seed(1);
            auto p = torch::randn({5, 3}, torch::requires_grad());
            auto q = p.detach().clone().requires_grad_();
            Sgd ours({p}, {0.9, nesterov, decay});
            torch::optim::SGD reference(
                {q}, torch::optim::SGDOptions(0.05).momentum(0.9).nesterov(nesterov).weight_decay(decay));
            for (int step = 0; step < 4; ++step) {
                auto g = torch::randn({5, 3});
                ours.step({g}, 0.05);
                q.mutable_grad() = g.clone();
                reference.step();
            }
            EXPECT_TRUE(torch::allclose(p, q, 1e-6, 1e-7)) << "nesterov " << nesterov << ", decay " << decay;
        }
}

TEST(Sgd, BitIdenticalToLibTorchsSgdOverSeveralParameters) {
    // The multi-tensor step must do exactly torch.optim.SGD's elementwise
    // operations: the printed losses of a fixed seed depend on every bit.
    struct Case {
        double momentum;
        bool nesterov;
        double decay;
    };
    for (const Case& c : {Case{0, false, 0}, Case{0, false, 1e-3}, Case{0.9, false, 0}, Case{0.9, false, 5e-4},
                          Case{0.9, true, 1e-4}, Case{0.5, true, 0}}) {
        torch::manual_seed(7);
        std::vector<torch::Tensor> ours_p, theirs_p;
        for (auto shape : std::vector<std::vector<std::int64_t>>{{16, 8}, {8}, {3, 2, 5, 5}, {1}}) {
            ours_p.push_back(torch::randn(shape));
            theirs_p.push_back(ours_p.back().clone().requires_grad_());
        }
        Sgd ours(ours_p, {c.momentum, c.nesterov, c.decay});
        torch::optim::SGD reference(theirs_p, torch::optim::SGDOptions(0.03)
                                                  .momentum(c.momentum)
                                                  .nesterov(c.nesterov)
                                                  .weight_decay(c.decay));
        for (int step = 0; step < 6; ++step) {
            std::vector<torch::Tensor> grads;
            for (const auto& p : ours_p) grads.push_back(torch::randn(p.sizes()));
            for (size_t i = 0; i < grads.size(); ++i) theirs_p[i].mutable_grad() = grads[i].clone();
            ours.step(grads, 0.03);
            reference.step();
            for (size_t i = 0; i < ours_p.size(); ++i)
                ASSERT_TRUE(torch::equal(ours_p[i], theirs_p[i].detach()))
                    << "parameter " << i << " after step " << step << ": momentum " << c.momentum << ", nesterov "
                    << c.nesterov << ", decay " << c.decay;
        }
    }
}

TEST(Sgd, ParametersWithoutMomentumInTheGradientStayExact) {
    // One parameter's gradient carries momentum (DGC); the others still step exactly as LibTorch's SGD.
    torch::manual_seed(3);
    std::vector<torch::Tensor> ours_p{torch::randn({4, 4}), torch::randn({6}), torch::randn({2, 3})};
    std::vector<torch::Tensor> theirs_p{ours_p[0].clone().requires_grad_(), ours_p[2].clone().requires_grad_()};
    Sgd ours(ours_p, {0.9, true, 1e-3});
    ours.set_momentum_in_gradient({false, true, false});
    torch::optim::SGD reference(theirs_p, torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3));
    torch::Tensor flagged = ours_p[1].clone();
    for (int step = 0; step < 4; ++step) {
        std::vector<torch::Tensor> grads{torch::randn({4, 4}), torch::zeros({6}), torch::randn({2, 3})};
        theirs_p[0].mutable_grad() = grads[0].clone();
        theirs_p[1].mutable_grad() = grads[2].clone();
        ours.step(grads, 0.1);
        reference.step();
    }
    EXPECT_TRUE(torch::equal(ours_p[0], theirs_p[0].detach()));
    EXPECT_TRUE(torch::equal(ours_p[2], theirs_p[1].detach()));
    EXPECT_FALSE(torch::equal(ours_p[1], flagged)) << "weight decay with momentum moves the flagged parameter";
}

TEST(Sgd, HandComputed) {
    // p = 1, g = 2, lr 0.1, momentum 0.5, weight decay 0.1:
    // step 1: d = 2 + 0.1 = 2.1, buf = 2.1, p = 1 - 0.21 = 0.79
    // step 2: d = 2 + 0.079 = 2.079, buf = 1.05 + 2.079 = 3.129, p = 0.79 - 0.3129 = 0.4771
    auto p = torch::ones({1}, torch::requires_grad());
    Sgd sgd({p}, {0.5, false, 0.1});
    sgd.step({torch::full({1}, 2.0)}, 0.1);
    EXPECT_NEAR(p.item<double>(), 0.79, 1e-6);
    sgd.step({torch::full({1}, 2.0)}, 0.1);
    EXPECT_NEAR(p.item<double>(), 0.4771, 1e-6);
}

TEST(Recorder, SumsRawGradientsOfTheEpoch) {
    auto data = tiny_synthetic(96);
    torch::manual_seed(1);
    auto model = make_model("mlp", data->info().shape, {});
    // lr 0: the weights stay put, so the epoch's sum is the sum of the batch gradients at the start.
    Trainer trainer(model, *data, plain_sgd(32));
    GradientRecorder recorder(trainer.parameter_tensors(), true);
    trainer.set_recorder(&recorder);
    std::vector<torch::Tensor> expected;
    for (const auto& p : trainer.parameter_tensors()) expected.push_back(torch::zeros_like(p));
    std::vector<std::vector<double>> step_norms;
    auto batches = data->train(0, {}, 32, 42);  // 42: the trainer's default seed
    for (std::int64_t b = 0; b < batches->size(); ++b) {
        model->zero_grad();
        auto batch = batches->get(b);
        torch::nn::functional::cross_entropy(model->forward(batch.input), batch.target).backward();
        std::vector<double> norms;
        for (size_t i = 0; i < expected.size(); ++i) {
            expected[i] += trainer.parameter_tensors()[i].grad();
            norms.push_back(trainer.parameter_tensors()[i].grad().norm().item<double>());
        }
        step_norms.push_back(norms);
    }
    std::vector<std::vector<double>> seen;
    auto result = trainer.train_epoch(
        0, 0.0, [&](const StepInfo&, double, std::int64_t) { seen.push_back(recorder.last_step_norms()); });
    EXPECT_EQ(result.steps, 3);
    EXPECT_EQ(result.samples, 96);
    auto norms = recorder.norms();
    for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_TRUE(torch::allclose(recorder.sums()[i], expected[i], 1e-5, 1e-6)) << i;
        EXPECT_NEAR(norms[i], expected[i].norm().item<double>(), 1e-5 * norms[i]);
    }
    ASSERT_EQ(seen.size(), 3u);
    for (size_t s = 0; s < 3; ++s)
        for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(seen[s][i], step_norms[s][i], 1e-5 * step_norms[s][i]);
    recorder.reset();
    for (double n : recorder.norms()) EXPECT_EQ(n, 0);
}

namespace {

// Doubles every gradient: the same as doubling the learning rate of plain SGD.
class Doubling : public GradientSync {
public:
    void exchange(std::vector<torch::Tensor>& gradients, const StepInfo& step) override {
        for (auto& g : gradients) g = g * 2;
        steps.push_back(step.global_step);
    }
    std::vector<std::int64_t> steps;
};

}  // namespace

TEST(Trainer, ExchangeReplacesGradientsAfterTheRecorder) {
    auto data = tiny_synthetic();
    torch::manual_seed(1);
    auto a = make_model("mlp", data->info().shape, {});
    torch::manual_seed(1);
    auto b = make_model("mlp", data->info().shape, {});
    Trainer doubled(a, *data, plain_sgd()), plain(b, *data, plain_sgd());
    Doubling exchange;
    doubled.set_exchange(&exchange);
    GradientRecorder ra(doubled.parameter_tensors(), false), rb(plain.parameter_tensors(), false);
    doubled.set_recorder(&ra);
    plain.set_recorder(&rb);
    doubled.train_epoch(0, 0.05);
    plain.train_epoch(0, 0.1);
    EXPECT_EQ(exchange.steps, (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    for (size_t i = 0; i < a->parameters().size(); ++i)
        EXPECT_TRUE(torch::allclose(a->parameters()[i], b->parameters()[i], 1e-5, 1e-6));
    // The recorder saw the raw gradients, before the exchange doubled them.
    auto na = ra.norms(), nb = rb.norms();
    for (size_t i = 0; i < na.size(); ++i) EXPECT_NEAR(na[i], nb[i], 1e-3 * nb[i]);
}

TEST(Trainer, MicroBatchesGiveTheWholeBatchGradient) {
    auto data = tiny_synthetic(100);
    torch::manual_seed(2);
    auto a = make_model("cnn", data->info().shape, {});
    torch::manual_seed(2);
    auto b = make_model("cnn", data->info().shape, {});
    TrainerOptions micro = plain_sgd(40);
    micro.micro_batch_size = 16;  // 16 + 16 + 8, and the last batch of 20 as 16 + 4
    Trainer ta(a, *data, micro), tb(b, *data, plain_sgd(40));
    GradientRecorder ra(ta.parameter_tensors(), false), rb(tb.parameter_tensors(), false);
    ta.set_recorder(&ra);
    tb.set_recorder(&rb);
    auto result_a = ta.train_epoch(0, 0.1), result_b = tb.train_epoch(0, 0.1);
    EXPECT_NEAR(result_a.loss, result_b.loss, 1e-5);
    EXPECT_EQ(result_a.samples, 100);
    for (size_t i = 0; i < ra.sums().size(); ++i) EXPECT_TRUE(torch::allclose(ra.sums()[i], rb.sums()[i], 1e-4, 1e-6));
    for (size_t i = 0; i < a->parameters().size(); ++i)
        EXPECT_TRUE(torch::allclose(a->parameters()[i], b->parameters()[i], 1e-4, 1e-6));
}

TEST(Trainer, LearnsTheSyntheticSetAndIsDeterministic) {
    auto data = tiny_synthetic(512, 256);
    auto run = [&] {
        torch::manual_seed(7);
        auto model = make_model("mlp", data->info().shape, {});
        TrainerOptions o;
        o.batch_size = 32;
        Trainer t(model, *data, o);
        for (int e = 0; e < 3; ++e) t.train_epoch(e, 0.05);
        return std::make_pair(model, t.evaluate());
    };
    auto [first, eval] = run();
    EXPECT_GT(eval.accuracy, 0.9);
    EXPECT_EQ(eval.samples, 256);
    auto second = run().first;
    EXPECT_TRUE(same_parameters(*first, *second));
}

TEST(Trainer, ClippingBoundsTheRecordedGradient) {
    auto data = tiny_synthetic();
    torch::manual_seed(1);
    auto model = make_model("mlp", data->info().shape, {});
    TrainerOptions o = plain_sgd();
    o.clip_norm = 0.01;
    Trainer t(model, *data, o);
    GradientRecorder recorder(t.parameter_tensors(), true);
    t.set_recorder(&recorder);
    t.train_epoch(0, 0.1, [&](const StepInfo&, double, std::int64_t) {
        double total = 0;
        for (double n : recorder.last_step_norms()) total += n * n;
        EXPECT_NEAR(std::sqrt(total), 0.01, 1e-6);
    });
}

TEST(Trainer, DivergenceIsAnError) {
    auto data = tiny_synthetic();
    torch::manual_seed(1);
    Trainer t(make_model("mlp", data->info().shape, {}), *data, plain_sgd());
    const std::string unread = error_of([&] { t.train_epoch(0, 1e30); });
    EXPECT_CONTAINS(unread, "training diverged: the loss is");
    // Read after every step (a progress callback) or at the end of the epoch: the same step is named.
    torch::manual_seed(1);
    Trainer u(make_model("mlp", data->info().shape, {}), *data, plain_sgd());
    std::int64_t last = -1;
    const std::string read = error_of([&] { u.train_epoch(0, 1e30, [&](const StepInfo& s, double, std::int64_t) { last = s.step; }); });
    EXPECT_EQ(read, unread);
    EXPECT_CONTAINS(read, ", step " + std::to_string(last + 1) + " ");
}

TEST(Trainer, EpochTotalsAreTheSumOfTheStepsExactly) {
    // Loss and accuracy accumulate on the device; they must equal the host's
    // double-precision sum of the steps' losses, bit for bit.
    auto data = tiny_synthetic();
    for (std::int64_t micro : {0, 8}) {
        torch::manual_seed(1);
        TrainerOptions o = plain_sgd();
        o.micro_batch_size = micro;
        Trainer t(make_model("mlp", data->info().shape, {}), *data, o);
        double loss_sum = 0;
        std::int64_t samples = 0;
        EpochResult r = t.train_epoch(0, 0.05, [&](const StepInfo&, double loss, std::int64_t n) {
            loss_sum += loss * static_cast<double>(n);
            samples += n;
        });
        EXPECT_EQ(r.samples, samples);
        EXPECT_EQ(r.loss, loss_sum / static_cast<double>(samples));
        EXPECT_GT(r.accuracy, 0);
        // The same run without a callback gives the same numbers.
        torch::manual_seed(1);
        Trainer quiet(make_model("mlp", data->info().shape, {}), *data, o);
        EpochResult q = quiet.train_epoch(0, 0.05);
        EXPECT_EQ(q.loss, r.loss);
        EXPECT_EQ(q.accuracy, r.accuracy);
    }
}

TEST(Trainer, LanguageModelLearnsARepeatedText) {
    std::vector<std::string> words;
    for (int i = 0; i < 400; ++i) words.push_back("t" + std::to_string(i % 7));
    auto data = make_text_dataset("text", "x", words, words, 5);
    ModelOptions m;
    m.hidden_size = m.embedding_size = 32;
    m.tied = true;
    torch::manual_seed(1);
    auto model = make_model("lstm", data->info().shape, m);
    TrainerOptions o = plain_sgd(4);
    o.optimizer.momentum = 0.9;
    o.clip_norm = 0.25;
    Trainer t(model, *data, o);
    const double before = t.evaluate().loss;
    for (int e = 0; e < 6; ++e) t.train_epoch(e, 1.0);
    auto after = t.evaluate();
    EXPECT_NEAR(before, std::log(7.0), 0.3);
    EXPECT_LT(after.loss, 0.5);
    EXPECT_GT(after.accuracy, 0.9);
}

TEST(Checkpoint, ResumedTrainingEqualsStraightTraining) {
    // resnet18 has batch-norm buffers and momentum buffers, all of which must come back.
    SyntheticOptions so;
    so.shape = {3, 8, 8};
    so.train = 24;
    so.test = 8;
    auto data = make_synthetic(so, 1);
    TrainerOptions o;
    o.batch_size = 8;
    o.optimizer = {0.9, true, 5e-4};
    TempDir dir;
    torch::manual_seed(3);
    auto straight = make_model("resnet18", data->info().shape, {});
    Trainer a(straight, *data, o);
    for (int e = 0; e < 3; ++e) a.train_epoch(e, 0.05);

    torch::manual_seed(3);
    auto first = make_model("resnet18", data->info().shape, {});
    Trainer b(first, *data, o);
    b.train_epoch(0, 0.05);
    b.train_epoch(1, 0.05);
    CheckpointInfo info{2, b.global_step(), "resnet18", "synthetic", 8, 1, 42, {"test", "test_train"}};
    TensorMap extra = {{"memory/layer1.0.conv1.weight", torch::full({2, 2}, 1.5)},
                       {"counter", torch::tensor({std::int64_t(7)})}};
    {
        acc::io::AtomicPath target(dir.file("ckpt.h5"));
        b.write_checkpoint(target, info, extra);
        // Whole, but not in place until the caller commits it.
        EXPECT_FALSE(std::filesystem::exists(dir.file("ckpt.h5")));
        target.commit();
    }

    torch::manual_seed(99);  // different initial weights, all overwritten by the checkpoint
    auto resumed = make_model("resnet18", data->info().shape, {});
    Trainer c(resumed, *data, o);
    TensorMap extra_back;
    CheckpointInfo back = c.load_checkpoint(dir.file("ckpt.h5"), &extra_back);
    EXPECT_EQ(back.epoch, 2);
    EXPECT_EQ(back.global_step, 6);
    EXPECT_EQ(back.model, "resnet18");
    EXPECT_EQ(back.seed, 42u);
    ASSERT_EQ(extra_back.size(), 2u);
    EXPECT_TRUE(torch::equal(extra_back.at("memory/layer1.0.conv1.weight"), extra.at("memory/layer1.0.conv1.weight")));
    EXPECT_EQ(extra_back.at("counter").scalar_type(), torch::kInt64);
    EXPECT_EQ(extra_back.at("counter").item<std::int64_t>(), 7);
    c.train_epoch(2, 0.05);
    EXPECT_TRUE(same_parameters(*straight, *resumed));
    auto ba = straight->named_buffers(), bc = resumed->named_buffers();
    for (const auto& item : ba) EXPECT_TRUE(torch::equal(item.value(), bc[item.key()])) << item.key();
    EXPECT_EQ(c.global_step(), a.global_step());
}

TEST(Checkpoint, RefusesAnotherModel) {
    auto data = tiny_synthetic();
    TempDir dir;
    Trainer a(make_model("mlp", data->info().shape, {}), *data, plain_sgd());
    acc::io::AtomicPath target(dir.file("mlp.h5"));
    a.write_checkpoint(target, {1, 8, "mlp", "synthetic", 32, 1, 1, {}});
    target.commit();
    Trainer b(make_model("cnn", data->info().shape, {}), *data, plain_sgd());
    EXPECT_CONTAINS(error_of([&] { b.load_checkpoint(dir.file("mlp.h5")); }),
                    dir.file("mlp.h5: does not belong to this model"));
    std::ofstream(dir.file("junk.h5")) << "not hdf5";
    EXPECT_CONTAINS(error_of([&] { a.load_checkpoint(dir.file("junk.h5")); }), dir.file("junk.h5"));
}

// A damaged checkpoint is refused naming the file and the dataset: a tensor without
// its dtype is no missing group, and NaN in a weight is no divergence of this run.
TEST(Checkpoint, DamageIsNamed) {
    auto data = tiny_synthetic();
    TempDir dir;
    Trainer a(make_model("mlp", data->info().shape, {}), *data, plain_sgd());
    const std::string path = dir.file("c.h5");
    auto save = [&] {
        acc::io::AtomicPath target(path);
        a.write_checkpoint(target, {1, 8, "mlp", "synthetic", 32, 1, 1, {}}, {{"ranks/0/error", torch::ones({3})}});
        target.commit();
    };
    save();
    const std::string weight = "/model/" + a.model().named_parameters().begin()->key();
    {
        acc::io::H5File f = acc::io::H5File::open(path, true);
        std::vector<float> values = f.read<float>(weight);
        values[1] = std::nanf("");
        f.write<float>(weight, values, f.shape(weight));
        f.write_attr(weight, "dtype", std::string("float32"));
    }
    EXPECT_EQ(error_of([&] { a.load_checkpoint(path); }),
              path + ": " + weight + " holds NaN or infinity; a checkpoint's values are finite, so the file is damaged");
    save();
    {
        acc::io::H5File f = acc::io::H5File::open(path, true);
        ASSERT_EQ(H5Adelete_by_name(f.id(), "/extra/ranks/0/error", "dtype", H5P_DEFAULT), 0);
    }
    TensorMap extra;
    EXPECT_EQ(error_of([&] { a.load_checkpoint(path, &extra); }),
              path + ": dataset /extra/ranks/0/error has no 'dtype' attribute; every tensor of a checkpoint names "
                     "its dtype");
}

// Every entry of the model table has a factory that builds it for the data the
// table says it takes, and the table's kind of data is the one the model accepts.
TEST(ModelTable, EveryModelBuildsForItsDefaultData) {
    ASSERT_EQ(model_names().size(), model_table().size());
    for (const ModelInfo& info : model_table()) {
        const DataShape shape{info.text ? std::vector<std::int64_t>{} : info.input.shape, info.input.classes};
        std::shared_ptr<Model> model;
        ASSERT_NO_THROW(model = make_model(info.name, shape, {})) << info.name;
        EXPECT_GT(count_values(*model), 0) << info.name;
        const DataShape other{info.text ? kCifar.input : std::vector<std::int64_t>{}, 10};
        EXPECT_THROW(make_model(info.name, other, {}), acc::UsageError) << info.name;
        EXPECT_EQ(&model_info(info.name), &info);
    }
    EXPECT_CONTAINS(error_of([] { make_model("resnet50", kCifar, {}); }),
                    "--model: unknown model 'resnet50' (known: mlp, cnn, resnet18, vgg19_bn, lstm)");
}

// compress-bench's built-in shape tables describe the models train-dist trains:
// resnet18 exactly (names, order, shapes); its lstm preset is the paper's
// three-layer model, whose every tensor the two-layer lstm here shares.
TEST(ModelTable, CompressBenchPresetsMatchTheModels) {
    const auto preset = acc::compress::preset_shapes("resnet18");
    const auto model = describe_parameters(*make_model("resnet18", kCifar, {}));
    ASSERT_EQ(preset.size(), model.size());
    for (size_t i = 0; i < preset.size(); ++i) {
        EXPECT_EQ(preset[i].name, model[i].name) << i;
        EXPECT_EQ(preset[i].shape, model[i].shape) << preset[i].name;
    }
    ModelOptions paper;  // 650 units, tied weights
    paper.tied = true;
    const auto paper_preset = acc::compress::preset_shapes("lstm");
    for (const auto& p : describe_parameters(*make_model("lstm", {{}, 33278}, paper))) {
        auto same = std::find_if(paper_preset.begin(), paper_preset.end(),
                                 [&](const acc::Parameter& q) { return q.name == p.name; });
        ASSERT_NE(same, paper_preset.end()) << p.name;
        EXPECT_EQ(same->shape, p.shape) << p.name;
    }
}

TEST(ComputeTime, TimesForwardAndBackwardOfEachStep) {
    EXPECT_EQ(default_compute_input("cnn").shape, (std::vector<std::int64_t>{1, 28, 28}));
    EXPECT_EQ(default_compute_input("vgg19_bn").shape, (std::vector<std::int64_t>{3, 32, 32}));
    EXPECT_EQ(default_compute_input("lstm").classes, 33278);
    EXPECT_CONTAINS(error_of([] { default_compute_input("resnet50"); }), "--model: unknown model 'resnet50'");

    ComputeTimingConfig config;
    config.model = "mlp";
    config.batch_size = 4;
    config.warmup = 2;
    config.steps = 3;
    int calls = 0;
    ComputeTimes times = time_compute(config, [&] { ++calls; });
    EXPECT_EQ(calls, 5);  // before every step, warm-up included
    ASSERT_EQ(times.forward.size(), 3u);
    ASSERT_EQ(times.backward.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_GT(times.forward[i], 0);
        EXPECT_GT(times.backward[i], 0);
        EXPECT_LT(times.forward[i] + times.backward[i], 10.0);
    }
    config.batch_size = 0;
    EXPECT_CONTAINS(error_of([&] { time_compute(config); }), "--batch-size: must be at least 1");
}
