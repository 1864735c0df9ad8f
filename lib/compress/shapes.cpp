#include "compress/shapes.hpp"

#include "base/error.hpp"
#include "base/shape.hpp"
#include "base/text.hpp"

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace acc::compress {
namespace {

using Shapes = std::vector<TensorInfo>;

void add(Shapes& s, const std::string& name, std::vector<std::int64_t> shape) { s.push_back({name, std::move(shape)}); }

void norm_layer(Shapes& s, const std::string& prefix, std::int64_t n) {
    add(s, prefix + ".weight", {n});
    add(s, prefix + ".bias", {n});
}

Shapes resnet18_cifar() {
    Shapes s;
    add(s, "conv1.weight", {64, 3, 3, 3});
    norm_layer(s, "bn1", 64);
    std::int64_t inplanes = 64;
    const std::int64_t widths[] = {64, 128, 256, 512};
    for (int layer = 0; layer < 4; ++layer) {
        const std::int64_t planes = widths[layer];
        for (int block = 0; block < 2; ++block) {
            const std::string p = "layer" + std::to_string(layer + 1) + "." + std::to_string(block);
            add(s, p + ".conv1.weight", {planes, block == 0 ? inplanes : planes, 3, 3});
            norm_layer(s, p + ".bn1", planes);
            add(s, p + ".conv2.weight", {planes, planes, 3, 3});
            norm_layer(s, p + ".bn2", planes);
            if (block == 0 && inplanes != planes) {
                add(s, p + ".shortcut.0.weight", {planes, inplanes, 1, 1});
                norm_layer(s, p + ".shortcut.1", planes);
            }
        }
        inplanes = planes;
    }
    add(s, "linear.weight", {10, 512});
    add(s, "linear.bias", {10});
    return s;
}

Shapes resnet50() {
    Shapes s;
    add(s, "conv1.weight", {64, 3, 7, 7});
    norm_layer(s, "bn1", 64);
    std::int64_t inplanes = 64;
    const std::int64_t widths[] = {64, 128, 256, 512};
    const int blocks[] = {3, 4, 6, 3};
    for (int layer = 0; layer < 4; ++layer) {
        const std::int64_t planes = widths[layer], out = 4 * planes;
        for (int block = 0; block < blocks[layer]; ++block) {
            const std::string p = "layer" + std::to_string(layer + 1) + "." + std::to_string(block);
            add(s, p + ".conv1.weight", {planes, block == 0 ? inplanes : out, 1, 1});
            norm_layer(s, p + ".bn1", planes);
            add(s, p + ".conv2.weight", {planes, planes, 3, 3});
            norm_layer(s, p + ".bn2", planes);
            add(s, p + ".conv3.weight", {out, planes, 1, 1});
            norm_layer(s, p + ".bn3", out);
            if (block == 0) {
                add(s, p + ".downsample.0.weight", {out, inplanes, 1, 1});
                norm_layer(s, p + ".downsample.1", out);
            }
        }
        inplanes = out;
    }
    add(s, "fc.weight", {1000, 2048});
    add(s, "fc.bias", {1000});
    return s;
}

Shapes vgg19() {
    Shapes s;
    // torchvision's configuration "E": numbers are 3x3 convolutions (each followed by a
    // ReLU), 0 a max-pool; every module takes one index in `features`.
    const int config[] = {64, 64, 0, 128, 128, 0, 256, 256, 256, 256, 0, 512, 512, 512, 512, 0, 512, 512, 512, 512, 0};
    std::int64_t in = 3;
    int index = 0;
    for (int c : config) {
        if (c == 0) {
            index += 1;
            continue;
        }
        const std::string p = "features." + std::to_string(index);
        add(s, p + ".weight", {c, in, 3, 3});
        add(s, p + ".bias", {c});
        in = c;
        index += 2;
    }
    add(s, "classifier.0.weight", {4096, 512 * 7 * 7});
    add(s, "classifier.0.bias", {4096});
    add(s, "classifier.3.weight", {4096, 4096});
    add(s, "classifier.3.bias", {4096});
    add(s, "classifier.6.weight", {1000, 4096});
    add(s, "classifier.6.bias", {1000});
    return s;
}

Shapes bert_base() {
    Shapes s;
    const std::int64_t hidden = 768, inner = 3072;
    add(s, "embeddings.word_embeddings.weight", {30522, hidden});
    add(s, "embeddings.position_embeddings.weight", {512, hidden});
    add(s, "embeddings.token_type_embeddings.weight", {2, hidden});
    norm_layer(s, "embeddings.LayerNorm", hidden);
    for (int layer = 0; layer < 12; ++layer) {
        const std::string p = "encoder.layer." + std::to_string(layer);
        for (const char* part : {"query", "key", "value"}) {
            add(s, p + ".attention.self." + part + ".weight", {hidden, hidden});
            add(s, p + ".attention.self." + part + ".bias", {hidden});
        }
        add(s, p + ".attention.output.dense.weight", {hidden, hidden});
        add(s, p + ".attention.output.dense.bias", {hidden});
        norm_layer(s, p + ".attention.output.LayerNorm", hidden);
        add(s, p + ".intermediate.dense.weight", {inner, hidden});
        add(s, p + ".intermediate.dense.bias", {inner});
        add(s, p + ".output.dense.weight", {hidden, inner});
        add(s, p + ".output.dense.bias", {hidden});
        norm_layer(s, p + ".output.LayerNorm", hidden);
    }
    add(s, "pooler.dense.weight", {hidden, hidden});
    add(s, "pooler.dense.bias", {hidden});
    return s;
}

Shapes lstm_wikitext2() {
    // PyTorch's word_language_model RNNModel: 33,278 tokens, 650 units, 3 layers; the
    // decoder's weight is the embedding's, so named_parameters() lists it once.
    Shapes s;
    const std::int64_t tokens = 33278, units = 650;
    add(s, "encoder.weight", {tokens, units});
    for (int layer = 0; layer < 3; ++layer) {
        const std::string l = std::to_string(layer);
        add(s, "rnn.weight_ih_l" + l, {4 * units, units});
        add(s, "rnn.weight_hh_l" + l, {4 * units, units});
        add(s, "rnn.bias_ih_l" + l, {4 * units});
        add(s, "rnn.bias_hh_l" + l, {4 * units});
    }
    add(s, "decoder.bias", {tokens});
    return s;
}

Shapes gpt2_medium() {
    // Hugging Face's GPT2Model, gpt2-medium (355M parameters): 24 blocks of width 1024,
    // 50,257 tokens, 1,024 positions. Its Conv1D layers keep weights as (in, out), and
    // the language-model head's weight is the token embedding's, so it is not listed again.
    Shapes s;
    const std::int64_t tokens = 50257, positions = 1024, width = 1024, inner = 4 * width;
    add(s, "wte.weight", {tokens, width});
    add(s, "wpe.weight", {positions, width});
    for (int layer = 0; layer < 24; ++layer) {
        const std::string p = "h." + std::to_string(layer);
        norm_layer(s, p + ".ln_1", width);
        add(s, p + ".attn.c_attn.weight", {width, 3 * width});
        add(s, p + ".attn.c_attn.bias", {3 * width});
        add(s, p + ".attn.c_proj.weight", {width, width});
        add(s, p + ".attn.c_proj.bias", {width});
        norm_layer(s, p + ".ln_2", width);
        add(s, p + ".mlp.c_fc.weight", {width, inner});
        add(s, p + ".mlp.c_fc.bias", {inner});
        add(s, p + ".mlp.c_proj.weight", {inner, width});
        add(s, p + ".mlp.c_proj.bias", {width});
    }
    norm_layer(s, "ln_f", width);
    return s;
}

}  // namespace


const std::vector<std::string>& model_presets() {
    static const std::vector<std::string> names = {"resnet18", "resnet50", "vgg19", "bert-base", "lstm", "gpt2-medium"};
    return names;
}

std::vector<TensorInfo> preset_shapes(const std::string& name) {
    if (name == "resnet18") return resnet18_cifar();
    if (name == "resnet50") return resnet50();
    if (name == "vgg19") return vgg19();
    if (name == "bert-base") return bert_base();
    if (name == "lstm") return lstm_wikitext2();
    if (name == "gpt2-medium") return gpt2_medium();
    throw UsageError("'" + name + "' is not a model preset (" + join(model_presets(), ", ") + ") or a shapes file");
}

std::vector<TensorInfo> read_shapes_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw FileError(path, "cannot be read");
    std::vector<TensorInfo> out;
    std::set<std::string> names;
    // Bounds that no model's shapes come near, so that a device or a binary file
    // given by mistake (/dev/zero) ends in an error instead of filling memory.
    constexpr size_t kMaxLine = 4096;
    constexpr int kMaxLines = 1'000'000;
    constexpr long long kMaxValues = 4'000'000'000;
    long long values = 0;
    std::string line;
    int number = 0;
    while (true) {
        line.clear();
        int ch = 0;
        while ((ch = in.get()) != EOF && ch != '\n' && line.size() <= kMaxLine) line.push_back(static_cast<char>(ch));
        if (ch == EOF && line.empty()) break;
        ++number;
        auto fail = [&](const std::string& problem) {
            throw FileError(path, "line " + std::to_string(number) + ": " + problem);
        };
        if (line.size() > kMaxLine)
            fail("longer than " + std::to_string(kMaxLine) + " bytes; a shapes file has lines of NAME SHAPE");
        if (number > kMaxLines)
            fail("more than " + std::to_string(kMaxLines) + " lines; a shapes file has one line per tensor");
        std::istringstream fields(line);
        std::string name, shape, extra;
        if (!(fields >> name) || name[0] == '#') continue;
        if (!(fields >> shape)) fail("'" + name + "' has no shape; write NAME SHAPE, e.g. conv1.weight 64x3x3x3");
        if (fields >> extra) fail("unexpected '" + extra + "' after the shape");
        TensorInfo t{name, {}};
        if (shape != "scalar") {
            for (const auto& dim : split(shape, 'x')) {
                char* end = nullptr;
                long long d = std::strtoll(dim.c_str(), &end, 10);
                if (dim.empty() || *end != '\0' || d < 1)
                    fail("shape '" + shape + "' of '" + name + "' must be positive whole numbers joined by 'x'");
                t.shape.push_back(d);
            }
        }
        long long numel = 1;
        for (long long d : t.shape) numel = d > kMaxValues / numel ? kMaxValues + 1 : numel * d;
        values += numel;
        if (values > kMaxValues)
            fail("the tensors hold more than " + with_commas(kMaxValues) + " values in all (16 GB of floats)");
        if (!names.insert(name).second) fail("'" + name + "' appears twice");
        out.push_back(std::move(t));
    }
    if (out.empty()) throw FileError(path, "lists no tensor (expected lines of NAME SHAPE)");
    return out;
}

}  // namespace acc::compress
