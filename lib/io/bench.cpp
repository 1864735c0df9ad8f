#include "io/bench.hpp"
#include "io/h5.hpp"

namespace acc::io {
namespace {

// The per-row float64 columns of /results, by dataset name.
struct Column {
    const char* name;
    double BenchRow::*field;
};

const std::vector<Column>& columns() {
    static const std::vector<Column> list = {
        {"compression_ratio", &BenchRow::compression_ratio},
        {"encode_seconds_median", &BenchRow::encode_median},
        {"encode_seconds_min", &BenchRow::encode_min},
        {"encode_seconds_max", &BenchRow::encode_max},
        {"decode_seconds_median", &BenchRow::decode_median},
        {"decode_seconds_min", &BenchRow::decode_min},
        {"decode_seconds_max", &BenchRow::decode_max},
        {"throughput", &BenchRow::throughput},
        {"relative_error", &BenchRow::relative_error},
        {"cosine", &BenchRow::cosine},
        {"gain", &BenchRow::gain},
        {"comm_seconds", &BenchRow::comm_seconds},
        {"iteration_seconds", &BenchRow::iteration_seconds},
        {"baseline_iteration_seconds", &BenchRow::baseline_iteration_seconds},
        {"speedup", &BenchRow::speedup},
    };
    return list;
}

}  // namespace

void write_bench(const std::string& path, const BenchFile& b) {
    write_file(path, b.header, kBenchFormat, kBenchMajor, kBenchMinor, [&](H5File& f) {
        f.write_attr("/", "source", b.source);
        f.write_attr("/", "network_source", b.network_source);
        f.write_attr("/", "comm_model", b.comm_model);
        f.write_attr("/", "comm_profile", b.comm_profile);
        f.write_attr("/", "alpha", b.alpha);
        f.write_attr("/", "bandwidth", b.bandwidth);
        f.write_attr("/", "allgather_alpha", b.allgather_alpha);
        f.write_attr("/", "allgather_bandwidth", b.allgather_bandwidth);
        f.write_attr("/", "compute_seconds", b.compute_seconds);
        f.write_attr("/", "backward_share", b.backward_share);
        f.write_attr("/", "bucket_bytes", b.bucket_bytes);
        f.write_attr("/", "reps", b.reps);
        f.write_attr("/", "threads", b.threads);
        f.write_attr("/", "memcpy_bandwidth", b.memcpy_bandwidth);
        f.write_attr("/", "vectors", b.vectors);
        f.write_attr("/", "topk_selection", b.topk_selection);
        write_parameters(f, b.parameters);
        std::vector<std::string> names;
        std::vector<double> norms;
        for (const auto& in : b.inputs) {
            names.push_back(in.name);
            norms.push_back(in.norm);
        }
        f.write_strings("/inputs/name", names);
        f.write("/inputs/norm", norms, Dims{norms.size()});
        const Dims rows{b.rows.size()};
        std::vector<std::int64_t> input, world, bytes;
        std::vector<std::string> compressor;
        std::vector<double> floats;
        for (const auto& r : b.rows) {
            input.push_back(r.input);
            compressor.push_back(r.compressor);
            world.push_back(r.world_size);
            bytes.push_back(r.bytes_per_worker);
            floats.push_back(static_cast<double>(r.bytes_per_worker) / 4.0);
        }
        f.create_group("/results");
        f.write("/results/input", input, rows);
        f.write_strings("/results/compressor", compressor);
        f.write("/results/world_size", world, rows);
        f.write("/results/bytes_per_worker", bytes, rows);
        f.write("/results/floats_per_worker", floats, rows);
        for (const auto& c : columns()) {
            std::vector<double> v;
            for (const auto& r : b.rows) v.push_back(r.*c.field);
            f.write(std::string("/results/") + c.name, v, rows);
        }
    });
}

BenchFile read_bench(const std::string& path) {
    H5File f = H5File::open(path, false);
    BenchFile b;
    b.header = read_header(f, kBenchFormat, kBenchMajor);
    auto text = [&](const char* name) { return f.has_attr("/", name) ? f.read_attr_string("/", name) : std::string(); };
    auto number = [&](const char* name) { return f.has_attr("/", name) ? f.read_attr_double("/", name) : 0.0; };
    b.source = text("source");
    b.network_source = text("network_source");
    if (f.has_attr("/", "comm_model")) b.comm_model = text("comm_model");
    b.comm_profile = text("comm_profile");
    b.alpha = number("alpha");
    b.bandwidth = number("bandwidth");
    b.allgather_alpha = f.has_attr("/", "allgather_alpha") ? number("allgather_alpha") : b.alpha;
    b.allgather_bandwidth = f.has_attr("/", "allgather_bandwidth") ? number("allgather_bandwidth") : b.bandwidth;
    b.compute_seconds = number("compute_seconds");
    b.backward_share = number("backward_share");
    b.bucket_bytes = number("bucket_bytes");
    b.reps = f.has_attr("/", "reps") ? f.read_attr_int("/", "reps") : 0;
    b.threads = f.has_attr("/", "threads") ? f.read_attr_int("/", "threads") : 1;
    b.memcpy_bandwidth = number("memcpy_bandwidth");
    b.vectors = text("vectors");
    b.topk_selection = text("topk_selection");
    b.parameters = read_parameters(f);
    auto names = f.read_strings("/inputs/name");
    Dims dims;
    auto norms = f.read<double>("/inputs/norm", &dims);
    if (norms.size() != names.size())
        f.fail("/inputs/norm has " + std::to_string(norms.size()) + " entries for " + std::to_string(names.size()) +
               " inputs");
    for (size_t i = 0; i < names.size(); ++i) b.inputs.push_back({names[i], norms[i]});
    auto compressor = f.read_strings("/results/compressor");
    const size_t count = compressor.size();
    auto column = [&](const std::string& name, auto sample) {
        return f.read_shaped<decltype(sample)>("/results/" + name, {count}, "one per result");
    };
    auto input = column("input", std::int64_t{});
    auto world = column("world_size", std::int64_t{});
    auto bytes = column("bytes_per_worker", std::int64_t{});
    b.rows.resize(count);
    for (size_t i = 0; i < count; ++i) {
        BenchRow& r = b.rows[i];
        r.input = input[i];
        r.compressor = compressor[i];
        r.world_size = world[i];
        r.bytes_per_worker = bytes[i];
        if (r.input < 0 || static_cast<size_t>(r.input) >= b.inputs.size())
            f.fail("/results/input is " + std::to_string(r.input) + " at row " + std::to_string(i) + ", but there are " +
                   std::to_string(b.inputs.size()) + " inputs");
        if (r.world_size < 1) f.fail("/results/world_size is " + std::to_string(r.world_size) + " at row " + std::to_string(i));
    }
    for (const auto& c : columns()) {
        auto v = column(c.name, double{});
        for (size_t i = 0; i < count; ++i) b.rows[i].*c.field = v[i];
    }
    return b;
}

}  // namespace acc::io
