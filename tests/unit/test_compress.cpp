// Compressor specs and the bytes each one sends (docs/metrics.md, "Data sent").
#include "base/error.hpp"
#include "compress/spec.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

using namespace acc::compress;
using acc::test::usage_error_of;

TEST(Spec, ParsesEveryKnownCompressor) {
    for (const char* text : {"none", "fp16", "powersgd:2", "topk:0.01", "randomk:0.1", "dgc:0.001", "signsgd",
                             "efsignsgd", "qsgd:4", "terngrad"}) {
        Spec s = parse_spec(text);
        EXPECT_EQ(s.text(), text);
        EXPECT_EQ(parse_spec(s.text()), s);
    }
    EXPECT_EQ(parse_spec("powersgd:2").parameter, 2);
    EXPECT_EQ(parse_spec("topk:1").text(), "topk:1");
    EXPECT_EQ(parse_spec("topk:0.010").text(), "topk:0.01");
}

TEST(Spec, RejectsBadSpecsWithTheValidList) {
    for (const char* text : {"", "foo", "powersgd", "powersgd:0", "powersgd:1.5", "powersgd:x", "topk:0", "topk:1.5",
                             "topk:-0.1", "topk:nan", "none:1", "signsgd:2", "qsgd:0", "qsgd:40000", "topk:", "TOPK:0.1",
                             "powersgd:0x10", "topk:0x1p-3", "powersgd: 2", "topk:inf"}) {
        EXPECT_THROW(parse_spec(text), acc::UsageError) << text;
    }
    try {
        parse_spec("foo:1");
        FAIL();
    } catch (const acc::UsageError& e) {
        std::string message = e.what();
        EXPECT_NE(message.find("powersgd:RANK"), std::string::npos);
        EXPECT_NE(message.find("topk:FRACTION"), std::string::npos);
    }
}

TEST(Spec, PowerSgdCompressesOnlyMatricesThatPassTheRateTest) {
    EXPECT_TRUE(powersgd_compresses({64, 64, 3, 3}, 2));   // 64 x 576: (640)*2*2 < 36864
    EXPECT_FALSE(powersgd_compresses({64}, 1));            // a vector
    EXPECT_FALSE(powersgd_compresses({4, 3}, 1));          // (4+3)*1*2 = 14 >= 12
    EXPECT_TRUE(powersgd_compresses({10, 5}, 1));          // 15*2 = 30 < 50
    EXPECT_FALSE(powersgd_compresses({4, 4}, 2));          // 8*2*2 = 32 >= 16
    MatrixView m = matrix_view({64, 3, 3, 3});
    EXPECT_EQ(m.rows, 64);
    EXPECT_EQ(m.cols, 27);
}

TEST(Spec, WireBytesFollowTheDocumentedFormulas) {
    const std::vector<std::int64_t> conv = {64, 64, 3, 3};  // 36,864 values; 64 x 576
    const std::int64_t n = 36864;
    EXPECT_EQ(wire_bytes(parse_spec("none"), conv), 4 * n);
    EXPECT_EQ(wire_bytes(parse_spec("fp16"), conv), 2 * n);
    EXPECT_EQ(wire_bytes(parse_spec("powersgd:2"), conv), 4 * (64 + 576) * 2);
    EXPECT_EQ(wire_bytes(parse_spec("powersgd:1000"), {8, 100}), 4 * 8 * 100);  // fails the rate test
    EXPECT_EQ(wire_bytes(parse_spec("topk:0.01"), conv), 8 * 368);             // floor(368.64)
    EXPECT_EQ(wire_bytes(parse_spec("topk:0.00001"), conv), 8 * 1);            // at least one
    EXPECT_EQ(wire_bytes(parse_spec("randomk:0.01"), conv), 4 * 368);
    EXPECT_EQ(wire_bytes(parse_spec("dgc:0.01"), conv), 8 * 368);
    EXPECT_EQ(wire_bytes(parse_spec("signsgd"), conv), 4 * (n / 32));
    EXPECT_EQ(wire_bytes(parse_spec("signsgd"), {33}), 8);
    EXPECT_EQ(wire_bytes(parse_spec("efsignsgd"), conv), 4 * (n / 32) + 4);
    EXPECT_EQ(wire_bytes(parse_spec("qsgd:4"), conv), n + 4 * (n / 128));
    EXPECT_EQ(wire_bytes(parse_spec("qsgd:255"), conv), 2 * n + 4 * (n / 128));
    EXPECT_EQ(wire_bytes(parse_spec("terngrad"), conv), n / 4 + 4);
    EXPECT_DOUBLE_EQ(wire_floats(parse_spec("powersgd:2"), conv), (64 + 576) * 2);
}

TEST(Spec, CollectivesAreDeclared) {
    EXPECT_EQ(parse_spec("topk:0.1").info().collective, Collective::allgather);
    EXPECT_EQ(parse_spec("powersgd:1").info().collective, Collective::allreduce);
    EXPECT_EQ(parse_spec("randomk:0.1").info().collective, Collective::allreduce);
    EXPECT_STREQ(collective_name(Collective::allgather), "allgather");
}

TEST(Registry, ListsEveryCompressorOnceInHelpOrder) {
    std::vector<std::string> names;
    for (const auto& c : compressors()) {
        names.push_back(c.name);
        EXPECT_NE(c.summary, nullptr) << c.name;
        EXPECT_NE(c.wire_bytes, nullptr) << c.name;
        EXPECT_NE(c.make_codec, nullptr) << c.name;
        EXPECT_EQ(find_compressor(c.name), &c);
        const ParameterInfo& p = c.parameter_info;
        if (p.name) {
            // Every default parses back to itself, and the example is a valid value.
            EXPECT_NE(p.short_name, nullptr) << c.name;
            EXPECT_FALSE(p.defaults.empty()) << c.name;
            EXPECT_NO_THROW(parse_spec(std::string(c.name) + ":" + p.example)) << c.name;
        } else {
            EXPECT_TRUE(p.defaults.empty()) << c.name;
        }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"none", "fp16", "powersgd", "topk", "randomk", "dgc", "signsgd",
                                               "efsignsgd", "qsgd", "terngrad"}));
    EXPECT_EQ(find_compressor("foo"), nullptr);
    EXPECT_EQ(find_compressor(""), nullptr);
}

TEST(Registry, SaysWhatTheExchangesTreatSpecially) {
    // What the exchanges and GraVAC ask the registry instead of testing names.
    std::vector<std::string> low_rank, momentum, warmup;
    for (const auto& c : compressors()) {
        if (c.low_rank) low_rank.push_back(c.name);
        if (c.momentum_in_gradient) momentum.push_back(c.name);
        if (c.sparsity_warmup) warmup.push_back(c.name);
        const auto& families = gravac_families();
        const bool family = std::find(families.begin(), families.end(), c.name) != families.end();
        EXPECT_EQ(c.gravac_family, family) << c.name;
    }
    EXPECT_EQ(low_rank, std::vector<std::string>{"powersgd"});
    EXPECT_EQ(momentum, std::vector<std::string>{"dgc"});
    EXPECT_EQ(warmup, std::vector<std::string>{"dgc"});
    EXPECT_EQ(gravac_families(), (std::vector<std::string>{"topk", "dgc", "randomk", "powersgd"}));
}

TEST(Registry, SaysWhatThePlannerAndTheProgramsAsk) {
    // The planner's error models, "none" and Accordion's defaults come from the
    // compressors' files, not from names written in the planner or the drivers.
    std::vector<std::string> exact, singular_values, tails, unknown;
    for (const auto& c : compressors()) {
        switch (c.residual_model) {
        case ResidualModel::exact: exact.push_back(c.name); break;
        case ResidualModel::singular_values: singular_values.push_back(c.name); break;
        case ResidualModel::topk_tail: tails.push_back(c.name); break;
        case ResidualModel::unknown: unknown.push_back(c.name); break;
        }
    }
    EXPECT_EQ(exact, std::vector<std::string>{"none"});
    EXPECT_EQ(singular_values, std::vector<std::string>{"powersgd"});
    EXPECT_EQ(tails, std::vector<std::string>{"topk"});
    EXPECT_EQ(unknown.size(), compressors().size() - 3);
    EXPECT_EQ(no_compression(), parse_spec("none"));
    EXPECT_EQ(kDefaultLow, parse_spec("powersgd:2"));
    EXPECT_EQ(kDefaultHigh, parse_spec("powersgd:1"));
    // A level travels between train-dist's ranks as its compressor's place in the
    // registry and its parameter.
    for (size_t i = 0; i < compressors().size(); ++i) EXPECT_EQ(registry_index(compressors()[i]), i);
    for (const char* text : {"none", "powersgd:3", "topk:0.01", "qsgd:127", "dgc:0.001"}) {
        const Spec spec = parse_spec(text);
        EXPECT_EQ((Spec{compressors()[registry_index(spec.info())].name, spec.parameter}), spec) << text;
    }
    CompressorInfo stranger;
    stranger.name = "stranger";
    EXPECT_THROW(registry_index(stranger), acc::Error);
}

TEST(Registry, ALevelsMessageOnOneLine) {
    EXPECT_EQ(parse_spec_line("topk:.10").text(), "topk:0.1");
    const std::string message = usage_error_of([] { parse_spec_line("zip:3"); });
    EXPECT_EQ(message, "'zip:3' is not a compressor spec; one of " + spec_list());
    EXPECT_NE(usage_error_of([] { parse_spec("zip:3"); }).find('\n'), std::string::npos);  // the full list
}

TEST(Registry, GeneratesTheListsOfHelpTexts) {
    EXPECT_EQ(spec_list(),
              "none, fp16, powersgd:RANK, topk:F, randomk:F, dgc:F, signsgd, efsignsgd, qsgd:LEVELS, terngrad");
    std::vector<std::string> defaults;
    for (const auto& spec : default_specs()) defaults.push_back(spec.text());
    EXPECT_EQ(defaults, (std::vector<std::string>{"none", "fp16", "powersgd:1", "powersgd:2", "powersgd:4",
                                                  "topk:0.01", "randomk:0.01", "dgc:0.01", "signsgd",
                                                  "efsignsgd", "qsgd:127", "terngrad"}));
    const std::string help = spec_help();
    EXPECT_EQ(help.substr(0, help.find('\n')), "  none               fp32 allreduce, no compression");
    EXPECT_NE(help.find("  qsgd:LEVELS        stochastic quantization to LEVELS levels, bucketed norms (1..32767)\n"),
              std::string::npos);
}

TEST(Registry, RangeErrorsNameTheParameterAndAnExample) {
    auto message = [](const std::string& text) {
        try {
            parse_spec(text);
        } catch (const acc::UsageError& e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    EXPECT_EQ(message("topk:2"), "'topk:2': FRACTION must be in (0, 1], e.g. topk:0.01");
    EXPECT_EQ(message("qsgd:40000"), "'qsgd:40000': LEVELS must be a whole number from 1 to 32767, e.g. qsgd:2");
    EXPECT_EQ(message("powersgd:0"), "'powersgd:0': RANK must be a whole number from 1 to 1000000000, e.g. powersgd:2");
    EXPECT_EQ(message("dgc"), "'dgc': dgc needs FRACTION, e.g. dgc:0.01");
    EXPECT_EQ(message("randomk:x"), "'randomk:x': FRACTION must be a number, e.g. randomk:0.01");
}
