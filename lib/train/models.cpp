// mlp, cnn, resnet18 and vgg19_bn (CIFAR variants) and the LSTM language model.
// Submodules are registered in PyTorch's order, so named_parameters() lists the
// names and order a PyTorch definition of the same model gives.
#include "train/models.hpp"

#include "base/error.hpp"
#include "base/shape.hpp"

namespace acc::train {
namespace {

namespace nn = torch::nn;
namespace F = torch::nn::functional;

void require_image(const std::string& model, const DataShape& shape, std::int64_t min_side) {
    if (shape.input.size() != 3) throw UsageError("--model " + model + ": needs images (channels x height x width)");
    if (shape.input[1] < min_side || shape.input[2] < min_side)
        throw UsageError("--model " + model + ": needs images of at least " + std::to_string(min_side) + "x" +
                         std::to_string(min_side) + " pixels, not " + std::to_string(shape.input[1]) + "x" +
                         std::to_string(shape.input[2]));
}

// Two hidden layers with ReLU.
class Mlp : public Model {
public:
    Mlp(std::int64_t inputs, std::int64_t hidden, std::int64_t classes)
        : fc1_(register_module("fc1", nn::Linear(inputs, hidden))),
          fc2_(register_module("fc2", nn::Linear(hidden, hidden))),
          fc3_(register_module("fc3", nn::Linear(hidden, classes))) {}
    torch::Tensor forward(const torch::Tensor& input) override {
        auto x = torch::relu(fc1_->forward(input.flatten(1)));
        return fc3_->forward(torch::relu(fc2_->forward(x)));
    }

private:
    nn::Linear fc1_, fc2_, fc3_;
};

// Two 3x3 convolutions, a 2x2 max-pool and two linear layers (PyTorch's MNIST example, without dropout).
class Cnn : public Model {
public:
    Cnn(const DataShape& shape)
        : conv1_(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(shape.input[0], 32, 3)))),
          conv2_(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3)))),
          fc1_(register_module("fc1", nn::Linear(64 * ((shape.input[1] - 4) / 2) * ((shape.input[2] - 4) / 2), 128))),
          fc2_(register_module("fc2", nn::Linear(128, shape.classes))) {}
    torch::Tensor forward(const torch::Tensor& input) override {
        auto x = torch::relu(conv1_->forward(input));
        x = torch::max_pool2d(torch::relu(conv2_->forward(x)), 2).flatten(1);
        return fc2_->forward(torch::relu(fc1_->forward(x)));
    }

private:
    nn::Conv2d conv1_, conv2_;
    nn::Linear fc1_, fc2_;
};

nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
    return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

// ResNet's basic block; the shortcut is a 1x1 convolution and batch norm where the shape changes.
class BasicBlock : public nn::Module {
public:
    BasicBlock(std::int64_t in, std::int64_t planes, std::int64_t stride)
        : conv1_(register_module("conv1", conv3x3(in, planes, stride))),
          bn1_(register_module("bn1", nn::BatchNorm2d(planes))),
          conv2_(register_module("conv2", conv3x3(planes, planes, 1))),
          bn2_(register_module("bn2", nn::BatchNorm2d(planes))) {
        if (stride != 1 || in != planes)
            shortcut_ = register_module(
                "shortcut", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, planes, 1).stride(stride).bias(false)),
                                           nn::BatchNorm2d(planes)));
    }
    torch::Tensor forward(const torch::Tensor& x) {
        auto out = torch::relu(bn1_->forward(conv1_->forward(x)));
        out = bn2_->forward(conv2_->forward(out));
        out += shortcut_ ? shortcut_->forward(x) : x;
        return torch::relu(out);
    }

private:
    nn::Conv2d conv1_;
    nn::BatchNorm2d bn1_;
    nn::Conv2d conv2_;
    nn::BatchNorm2d bn2_;
    nn::Sequential shortcut_{nullptr};
};

// ResNet-18 for CIFAR: 3x3 stem with stride 1 and no max-pool (the variant the paper trains).
class ResNet18 : public Model {
public:
    explicit ResNet18(const DataShape& shape)
        : conv1_(register_module("conv1", conv3x3(shape.input[0], 64, 1))),
          bn1_(register_module("bn1", nn::BatchNorm2d(64))) {
        std::int64_t in = 64;
        const std::int64_t planes[] = {64, 128, 256, 512};
        for (int l = 0; l < 4; ++l) {
            nn::Sequential layer;
            for (int b = 0; b < 2; ++b) {
                layer->push_back(std::make_shared<BasicBlock>(in, planes[l], b == 0 && l > 0 ? 2 : 1));
                in = planes[l];
            }
            layers_.push_back(register_module("layer" + std::to_string(l + 1), layer));
        }
        linear_ = register_module("linear", nn::Linear(512, shape.classes));
    }
    torch::Tensor forward(const torch::Tensor& input) override {
        auto x = torch::relu(bn1_->forward(conv1_->forward(input)));
        for (auto& layer : layers_) x = layer->forward(x);
        return linear_->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
    }

private:
    nn::Conv2d conv1_;
    nn::BatchNorm2d bn1_;
    std::vector<nn::Sequential> layers_;
    nn::Linear linear_{nullptr};
};

// VGG-19 with batch norm for CIFAR: 16 convolutions and one linear classifier.
// A max-pool that would shrink a side below one pixel (small images) is left out.
class Vgg19Bn : public Model {
public:
    explicit Vgg19Bn(const DataShape& shape) {
        const int kPool = 0;
        const int config[] = {64,  64,  kPool, 128, 128,   kPool, 256, 256, 256, 256,  kPool,
                              512, 512, 512,   512, kPool, 512,   512, 512, 512, kPool};
        std::int64_t channels = shape.input[0], height = shape.input[1], width = shape.input[2];
        for (int c : config) {
            if (c == kPool) {
                if (height >= 2 && width >= 2) {
                    features_->push_back(nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2)));
                    height /= 2;
                    width /= 2;
                } else {
                    features_->push_back(nn::Identity());
                }
            } else {
                features_->push_back(nn::Conv2d(nn::Conv2dOptions(channels, c, 3).padding(1)));
                features_->push_back(nn::BatchNorm2d(c));
                features_->push_back(nn::ReLU(nn::ReLUOptions(true)));
                channels = c;
            }
        }
        register_module("features", features_);
        classifier_ = register_module("classifier", nn::Linear(512, shape.classes));
    }
    torch::Tensor forward(const torch::Tensor& input) override {
        auto x = features_->forward(input);
        return classifier_->forward(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
    }

private:
    nn::Sequential features_;
    nn::Linear classifier_{nullptr};
};

// The decoder of a language model with tied weights: only its bias is its own
// (PyTorch lists a tied decoder's weight once, as encoder.weight).
class TiedDecoder : public nn::Module {
public:
    explicit TiedDecoder(std::int64_t vocabulary) : bias(register_parameter("bias", torch::zeros({vocabulary}))) {}
    torch::Tensor bias;
};

// Two-layer LSTM language model (PyTorch's word_language_model): embedding,
// LSTM, linear decoder; the hidden state carries over between batches, detached.
class LanguageModel : public Model {
public:
    LanguageModel(std::int64_t vocabulary, std::int64_t embedding, std::int64_t hidden, bool tied, double dropout)
        : vocabulary_(vocabulary),
          hidden_size_(hidden),
          drop_(register_module("drop", nn::Dropout(dropout))),
          encoder_(register_module("encoder", nn::Embedding(vocabulary, embedding))),
          rnn_(register_module("rnn", nn::LSTM(nn::LSTMOptions(embedding, hidden).num_layers(2).dropout(dropout)))) {
        torch::NoGradGuard no_grad;
        encoder_->weight.uniform_(-0.1, 0.1);
        if (tied) {
            tied_ = register_module("decoder", std::make_shared<TiedDecoder>(vocabulary));
        } else {
            decoder_ = register_module("decoder", nn::Linear(hidden, vocabulary));
            decoder_->weight.uniform_(-0.1, 0.1);
            decoder_->bias.zero_();
        }
    }
    torch::Tensor forward(const torch::Tensor& input) override {
        const std::int64_t streams = input.size(1);
        if (!h_.defined() || h_.size(1) != streams) {
            h_ = torch::zeros({2, streams, hidden_size_}, torch::TensorOptions().device(input.device()));
            c_ = torch::zeros_like(h_);
        }
        auto embedded = drop_->forward(encoder_->forward(input));
        auto [output, state] = rnn_->forward(embedded, std::make_tuple(h_, c_));
        h_ = std::get<0>(state).detach();
        c_ = std::get<1>(state).detach();
        output = drop_->forward(output);
        auto logits = tied_ ? F::linear(output, encoder_->weight, tied_->bias) : decoder_->forward(output);
        return logits.reshape({-1, vocabulary_});
    }
    void reset_state() override {
        h_ = torch::Tensor();
        c_ = torch::Tensor();
    }

private:
    std::int64_t vocabulary_, hidden_size_;
    nn::Dropout drop_;
    nn::Embedding encoder_;
    nn::LSTM rnn_;
    nn::Linear decoder_{nullptr};
    std::shared_ptr<TiedDecoder> tied_;
    torch::Tensor h_, c_;
};

// One factory per entry of the model table (lib/train/model_table.cpp); the
// shape has been checked against the table's kind of data (text or images).
using Factory = std::shared_ptr<Model> (*)(const std::string& name, const DataShape& shape,
                                           const ModelOptions& options);

std::shared_ptr<Model> make_lstm(const std::string&, const DataShape& shape, const ModelOptions& options) {
    const std::int64_t hidden = options.hidden_size > 0 ? options.hidden_size : 650;
    const std::int64_t embedding = options.embedding_size > 0 ? options.embedding_size : 650;
    if (options.tied && hidden != embedding)
        throw UsageError("--tied: needs --embedding-size equal to --hidden-size (now " + std::to_string(embedding) +
                         " and " + std::to_string(hidden) + ")");
    return std::make_shared<LanguageModel>(shape.classes, embedding, hidden, options.tied, options.dropout);
}

std::shared_ptr<Model> make_mlp(const std::string&, const DataShape& shape, const ModelOptions& options) {
    return std::make_shared<Mlp>(shape_numel(shape.input), options.hidden_size > 0 ? options.hidden_size : 256,
                                 shape.classes);
}

// An image model whose layers need images of at least `min_side` pixels a side.
template <class Net, std::int64_t min_side>
std::shared_ptr<Model> make_image_model(const std::string& name, const DataShape& shape, const ModelOptions&) {
    require_image(name, shape, min_side);
    return std::make_shared<Net>(shape);
}

Factory factory_of(const std::string& name) {
    static const std::vector<std::pair<std::string, Factory>> factories = {
        {"mlp", make_mlp},
        {"cnn", make_image_model<Cnn, 6>},
        {"resnet18", make_image_model<ResNet18, 1>},
        {"vgg19_bn", make_image_model<Vgg19Bn, 1>},
        {"lstm", make_lstm},
    };
    for (const auto& [model, factory] : factories)
        if (model == name) return factory;
    throw Error("internal error: model '" + name + "' of the model table has no factory in models.cpp");
}

}  // namespace

std::shared_ptr<Model> make_model(const std::string& name, const DataShape& shape, const ModelOptions& options) {
    const ModelInfo& info = model_info(name);
    if (shape.classes < 1) throw UsageError("--model " + name + ": the dataset has no classes");
    if (info.text && !shape.input.empty())
        throw UsageError("--model " + name + ": needs a text dataset (" + info.default_dataset + ")");
    if (!info.text && shape.input.empty()) throw UsageError("--model " + name + ": needs an image dataset, not text");
    return factory_of(name)(name, shape, options);
}

std::vector<io::Parameter> describe_parameters(const torch::nn::Module& model) {
    std::vector<io::Parameter> out;
    for (const auto& item : model.named_parameters()) {
        const auto sizes = item.value().sizes();
        out.push_back({item.key(), std::vector<std::int64_t>(sizes.begin(), sizes.end())});
    }
    return out;
}

}  // namespace acc::train
