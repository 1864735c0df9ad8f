// The file layer under faults and hostile files: a full disk during an append,
// planted symbolic links, damaged variable-length strings, declared sizes the
// file cannot hold, data kept in another file, fixed-length strings.
#include "base/error.hpp"
#include "io/atomic.hpp"
#include "io/grads.hpp"
#include "io/h5.hpp"
#include "io/header.hpp"
#include "io/output.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <csignal>
#include <fcntl.h>
#include <sys/file.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace acc::io;
using acc::test::error_of;
using acc::test::TempDir;

namespace {

std::vector<Parameter> model() { return {{"fc1.weight", {64, 64}}, {"fc1.bias", {64}}}; }

EpochStats epoch(int e) {
    EpochStats s;
    s.lr = 0.1;
    s.steps = 10;
    s.norm = {1.0 + e, 2.0 + e};
    return s;
}

std::vector<char> bytes_of(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Offset of `needle` in `bytes`, or npos.
size_t find(const std::vector<char>& bytes, const std::string& needle, size_t from = 0) {
    auto it = std::search(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.end(), needle.begin(), needle.end());
    return it == bytes.end() ? std::string::npos : static_cast<size_t>(it - bytes.begin());
}

std::string le(std::uint64_t value, size_t bytes) {
    std::string out;
    for (size_t i = 0; i < bytes; ++i, value >>= 8) out += static_cast<char>(value & 0xff);
    return out;
}

// A file with one header (variable-length string attributes) and `body`.
std::string write_small(const TempDir& dir, const std::string& name, const std::function<void(H5File&)>& body) {
    std::string path = dir.file(name);
    write_file(path, {"", 1, 0, {"test_io_faults 1", "test_io_faults"}, "2026-01-01T00:00:00Z"}, "accordion.test", 1, 0,
               body);
    return path;
}

// Creates a file with the raw HDF5 API, for layouts our writers never produce.
struct RawFile {
    explicit RawFile(const std::string& path) : id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)) {}
    ~RawFile() { H5Fclose(id); }
    hid_t id;
};

}  // namespace

// A full disk during an append leaves the previous epochs whole and resumable.
TEST(Faults, FailedAppendKeepsThePreviousEpochs) {
    TempDir dir;
    std::string path = dir.file("grads.h5");
    {
        GradsWriter w(path, {"t", "t"}, {}, model(), true);
        w.append_epoch(epoch(0));
        w.append_epoch(epoch(1));
    }
    const auto before = fs::file_size(path);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // Files may not grow past what epochs 0-1 need, so the next epoch's
        // snapshot cannot be written: the same as a disk that is full.
        std::signal(SIGXFSZ, SIG_IGN);
        rlimit limit{before + 4096, before + 4096};
        setrlimit(RLIMIT_FSIZE, &limit);
        int code = 0;
        try {
            GradsWriter w = GradsWriter::resume(path, model(), 2, true);
            for (size_t p = 0; p < model().size(); ++p)
                w.add_snapshot(p, std::vector<float>(static_cast<size_t>(model()[p].numel()), 1.5f));
            w.add_step_norms(20, {1, 2});
            w.append_epoch(epoch(2));
            code = 3;  // the append should have failed
        } catch (const acc::FileError&) {
            code = 1;
        } catch (...) {
            code = 4;
        }
        _exit(code);
    }
    int status = 0;
    waitpid(child, &status, 0);
    ASSERT_TRUE(WIFEXITED(status)) << "the writer died of signal " << WTERMSIG(status);
    ASSERT_EQ(WEXITSTATUS(status), 1);
    GradStats g = read_grads(path);
    ASSERT_EQ(g.epochs.size(), 2u);
    EXPECT_EQ(g.epochs[1].norm, epoch(1).norm);
    EXPECT_TRUE(g.snapshot_epochs.empty());
    // Nothing of the failed attempt is left beside the file, and the run can go on.
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"grads.h5"}));
    GradsWriter w = GradsWriter::resume(path, model(), 2, true);
    w.append_epoch(epoch(2));
    w.finish();
    EXPECT_EQ(read_grads(path).epochs.size(), 3u);
}

// A link planted where a temporary file might go is never written through.
TEST(Faults, PlantedLinksAreNotFollowed) {
    TempDir dir;
    std::string victim = dir.file("victim.txt");
    std::ofstream(victim) << "precious";
    // Every name the old scheme would have picked: .<name>.tmp-<pid>-<n>.
    for (int n = 0; n < 8; ++n)
        fs::create_symlink(victim, dir.file(".out.h5.tmp-" + std::to_string(getpid()) + "-" + std::to_string(n)));
    std::string out = dir.file("out.h5");
    for (int i = 0; i < 3; ++i) write_small(dir, "out.h5", [](H5File& f) { f.write_attr("/", "x", std::int64_t{1}); });
    std::ifstream in(victim);
    std::string content;
    in >> content;
    EXPECT_EQ(content, "precious");
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(out)));
    EXPECT_EQ(H5File::open(out, false).read_attr_int("/", "x"), 1);
}

TEST(Faults, TemporaryNamesAreUnpredictableAndPrivate) {
    TempDir dir;
    std::string dest = dir.file("out.h5");
    AtomicPath a(dest), b(dest);
    EXPECT_NE(a.temp(), b.temp());
    struct stat st {};
    ASSERT_EQ(lstat(fs::path(a.temp()).parent_path().c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_NE(fs::path(a.temp()).parent_path().filename().string().find(".out.h5.tmp-" + std::to_string(getpid()) + "-"),
              std::string::npos);
}

// Any name the file system takes (up to 255 bytes) is a valid output: the temporary
// directory beside it must not need a longer one.
TEST(Faults, OutputNamesUpTo255BytesAreWritten) {
    TempDir dir;
    for (size_t length : {200, 201, 233, 255}) {
        const std::string name = std::string(length - 3, 'n') + ".h5";
        const std::string path = write_small(dir, name, [](H5File& f) { f.write_attr("/", "x", std::int64_t{2}); });
        EXPECT_EQ(H5File::open(path, false).read_attr_int("/", "x"), 2) << length;
        AtomicPath a(path), b(path);
        EXPECT_NE(a.temp(), b.temp()) << length;
        EXPECT_LE(fs::path(a.temp()).parent_path().filename().string().size(), 255u) << length;
    }
    for (const std::string& entry : dir.entries())
        EXPECT_EQ(entry.find(".tmp-"), std::string::npos) << "left behind: " << entry;
}

// Two runs writing one name: the second is refused while the first holds it, and is
// told which run that is; once the first ends (or dies) the name is free again.
TEST(Faults, AnOutputInUseByAnotherRunIsRefused) {
    TempDir dir;
    const std::string out = dir.file("c.h5");
    {
        OutputClaim first = claim_output(out, "grad-dump", false);
        EXPECT_EQ(first.lock_path(), dir.file(".c.h5.lock"));
        const std::string refused = error_of([&] { claim_output(out, "train-dist", false); });
        EXPECT_CONTAINS(refused, out + ": is being written by grad-dump (process " + std::to_string(getpid()) + " on ");
        EXPECT_CONTAINS(refused, "wait until that run ends, or write to another name");
        // --force replaces files, never another run's claim.
        EXPECT_CONTAINS(error_of([&] { claim_output(out, "train-dist", true); }), "is being written by grad-dump");
        // Another name in the same directory is free.
        OutputClaim other = claim_output(dir.file("d.h5"), "grad-dump", false);
        OutputClaim moved = std::move(first);
        EXPECT_CONTAINS(error_of([&] { claim_output(out, "train-dist", false); }), "is being written by");
    }
    EXPECT_FALSE(fs::exists(dir.file(".c.h5.lock")));
    EXPECT_NO_THROW(claim_output(out, "train-dist", false));
    // A holder killed with SIGKILL holds nothing: its lock file stays, its lock does not.
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t holder = fork();
    if (holder == 0) {
        OutputClaim claim = claim_output(out, "grad-dump", false);
        (void)!write(ready[1], "x", 1);
        pause();
        _exit(0);
    }
    char byte = 0;
    ASSERT_EQ(read(ready[0], &byte, 1), 1);
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "regime-detect", false); }),
                    "is being written by grad-dump (process " + std::to_string(holder) + " on ");
    kill(holder, SIGKILL);
    waitpid(holder, nullptr, 0);
    close(ready[0]);
    close(ready[1]);
    EXPECT_TRUE(fs::exists(dir.file(".c.h5.lock")));
    EXPECT_NO_THROW(claim_output(out, "regime-detect", false));
    // A link planted at the lock's name is not followed.
    std::ofstream(dir.file("victim.txt")) << "precious";
    fs::remove(dir.file(".c.h5.lock"));
    fs::create_symlink(dir.file("victim.txt"), dir.file(".c.h5.lock"));
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "grad-dump", false); }), "symbolic link");
    EXPECT_EQ(fs::file_size(dir.file("victim.txt")), 8u);
}

// A lock file is written only when this run created it: a hard link planted at its
// name (which O_NOFOLLOW does not stop), a FIFO or a directory there is refused,
// and the file it leads to keeps its bytes.
TEST(Faults, ALockFileThatIsALinkOrNotAFileIsRefusedAndNeverWritten) {
    TempDir dir;
    const std::string out = dir.file("s.h5"), lock = dir.file(".s.h5.lock");
    std::ofstream(dir.file("victim.txt")) << "PRECIOUS\n";
    ASSERT_EQ(link(dir.file("victim.txt").c_str(), lock.c_str()), 0);
    EXPECT_EQ(error_of([&] { claim_output(out, "regime-detect", false); }),
              out + ": its lock file " + lock +
                  " is not a regular file with one link (a link to another file, or not a file at all); remove it");
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "regime-detect", true); }), "not a regular file with one link");
    std::ifstream victim(dir.file("victim.txt"));
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(victim), {}), "PRECIOUS\n");
    EXPECT_TRUE(fs::exists(lock)) << "a refused lock file is the user's to remove";
    fs::remove(lock);
    ASSERT_EQ(mkfifo(lock.c_str(), 0644), 0);
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "regime-detect", false); }), "not a regular file with one link");
    fs::remove(lock);
    fs::create_directory(lock);
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "regime-detect", false); }), "not a regular file with one link");
    fs::remove(lock);
    // A stale lock of this user's is replaced by a new file, which the run removes at its end.
    std::ofstream(lock) << "grad-dump (process 1 on gone, started long ago)\n";
    {
        OutputClaim claim = claim_output(out, "regime-detect", false);
        EXPECT_CONTAINS(error_of([&] { claim_output(out, "train-dist", false); }), "is being written by regime-detect");
    }
    EXPECT_FALSE(fs::exists(lock));
}

// Another user's stale lock (root's, mode 0644) in a shared sticky directory: a
// user who can neither write nor remove it still takes it over, since flock needs
// only a descriptor opened for reading; while that run holds it, others are refused.
TEST(Faults, AnotherUsersStaleLockIsTakenOver) {
    if (geteuid() != 0) GTEST_SKIP() << "needs root, to leave a lock file as one user and claim it as another";
    TempDir dir;
    ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
    const std::string shared = dir.file("shared");
    fs::create_directory(shared);
    ASSERT_EQ(chmod(shared.c_str(), 01777), 0);
    const std::string out = shared + "/s.h5", lock = shared + "/.s.h5.lock";
    std::ofstream(lock) << "grad-dump (process 1 on gone, started long ago)\n";
    ASSERT_EQ(chmod(lock.c_str(), 0644), 0);
    int ready[2], done[2];
    ASSERT_EQ(pipe(ready), 0);
    ASSERT_EQ(pipe(done), 0);
    const pid_t user = fork();
    if (user == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
        std::string message = "ok";
        std::optional<OutputClaim> claim;
        try {
            claim.emplace(claim_output(out, "regime-detect", false));
        } catch (const acc::Error& e) {
            message = e.what();
        }
        (void)!write(ready[1], message.data(), message.size());
        close(ready[1]);
        char byte = 0;
        (void)!read(done[0], &byte, 1);
        _exit(0);
    }
    close(ready[1]);
    char text[512] = {};
    const ssize_t n = read(ready[0], text, sizeof text - 1);
    EXPECT_EQ(std::string(text, static_cast<size_t>(std::max<ssize_t>(n, 0))), "ok");
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "train-dist", false); }), "is being written by");
    (void)!write(done[1], "x", 1);
    int status = 0;
    waitpid(user, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    close(ready[0]);
    close(done[0]);
    close(done[1]);
    EXPECT_NO_THROW(claim_output(out, "train-dist", false)) << "the lock goes with its holder";
}

// What stands at an output name is replaced only when losing it costs nothing: a new
// name, an empty file, or an HDF5 file this user may write. Otherwise --force says so.
TEST(Faults, ReadOnlyOrForeignFilesAreReplacedOnlyWithForce) {
    TempDir dir;
    const std::string notes = dir.file("notes.h5");
    std::ofstream(notes) << "my notes, not HDF5";
    EXPECT_EQ(error_of([&] { claim_output(notes, "regime-detect", false); }),
              notes + ": exists and is not an HDF5 file; choose another name or give --force to replace it");
    EXPECT_NO_THROW(claim_output(notes, "regime-detect", true));
    const std::string empty = dir.file("empty.h5");
    std::ofstream(empty).flush();
    EXPECT_NO_THROW(claim_output(empty, "regime-detect", false));
    const std::string h5 = write_small(dir, "old.h5", [](H5File&) {});
    EXPECT_NO_THROW(claim_output(h5, "regime-detect", false));
    // HDF5 after a user block of 512 bytes is HDF5 too.
    std::string blocked(512, ' ');
    blocked += std::string("\x89HDF\r\n\x1a\n", 8) + std::string(100, '\0');
    std::ofstream(dir.file("block.h5"), std::ios::binary) << blocked;
    EXPECT_NO_THROW(claim_output(dir.file("block.h5"), "regime-detect", false));
    ASSERT_EQ(chmod(h5.c_str(), 0444), 0);  // refused for root too
    EXPECT_EQ(error_of([&] { claim_output(h5, "regime-detect", false); }),
              h5 + ": exists and is read-only; make it writable or give --force to replace it");
    EXPECT_NO_THROW(claim_output(h5, "regime-detect", true));
}

// What a killed run left behind goes at the next start; nothing else does.
TEST(Faults, StaleTemporariesOfDeadProcessesAreRemoved) {
    TempDir dir;
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, nullptr, 0);
    const std::string dead = std::to_string(gone), alive = std::to_string(getppid());
    std::ofstream(dir.file(".out.h5.tmp-" + dead + "-0")) << "old scheme";
    fs::create_directory(dir.file(".out.h5.tmp-" + dead + "-abc"));
    std::ofstream(dir.file(".out.h5.tmp-" + dead + "-abc/out.h5")) << "new scheme";
    std::ofstream(dir.file("victim.txt")) << "precious";
    fs::create_symlink(dir.file("victim.txt"), dir.file(".out.h5.tmp-" + dead + "-1"));
    std::ofstream(dir.file(".out.h5.tmp-" + alive + "-0")) << "another run's";
    std::ofstream(dir.file(".other.h5.tmp-" + dead + "-0")) << "another file's";
    std::ofstream(dir.file(".out.h5.tmp-notapid")) << "not ours";
    write_small(dir, "out.h5", [](H5File&) {});
    std::vector<std::string> left = dir.entries();
    std::sort(left.begin(), left.end());
    EXPECT_EQ(left, (std::vector<std::string>{".other.h5.tmp-" + dead + "-0", ".out.h5.tmp-" + alive + "-0",
                                              ".out.h5.tmp-notapid", "out.h5", "victim.txt"}));
    EXPECT_EQ(fs::file_size(dir.file("victim.txt")), 8u);
    // A program checks its output when it starts, and that clears them already.
    std::ofstream(dir.file(".late.h5.tmp-" + dead + "-0")) << "old scheme";
    check_writable_destination(dir.file("late.h5"));
    EXPECT_FALSE(fs::exists(dir.file(".late.h5.tmp-" + dead + "-0")));
}

// A damaged length of a variable-length string is an error, never a crash.
TEST(Faults, DamagedStringLengthsAreRefused) {
    TempDir dir;
    std::string path = write_small(dir, "a.h5", [](H5File& f) {
        f.write_strings("/names", {"fc1.weight", "fc1.bias"});
    });
    const std::vector<char> good = bytes_of(path);
    const size_t heap = find(good, "GCOL");
    ASSERT_NE(heap, std::string::npos);
    // The attribute's record: length 14 ("accordion.test"), the heap's address.
    const size_t record = find(good, le(14, 4) + le(heap, 8));
    ASSERT_NE(record, std::string::npos);
    for (std::uint32_t length : {0u, 1u, 13u, 15u, 0x7fffffffu, 0xffffffffu}) {
        std::vector<char> bad = good;
        std::memcpy(bad.data() + record, le(length, 4).data(), 4);
        write_bytes(path, bad);
        std::string message = error_of([&] { read_header(H5File::open(path, false), "accordion.test", 1); });
        if (length == 0) {
            // Zero reads as an empty string: the wrong kind of file, found without reading the heap.
            EXPECT_CONTAINS(message, "a.h5: ");
        } else {
            EXPECT_CONTAINS(message, "a.h5: attribute 'format' of / declares " + std::to_string(length));
        }
    }
    // The heap object's own size, past the end of its collection.
    std::vector<char> bad = good;
    const size_t object = find(good, "fc1.weight", heap) - 8;  // its size field precedes the text
    std::memcpy(bad.data() + object, le(1 << 20, 8).data(), 8);
    write_bytes(path, bad);
    EXPECT_CONTAINS(error_of([&] { H5File::open(path, false).read_strings("/names"); }), "a.h5: dataset /names");
}

// A declared shape is checked against the file before any memory is allocated.
TEST(Faults, DeclaredSizesMustFitTheFile) {
    TempDir dir;
    std::string path = dir.file("huge.h5");
    {
        RawFile f(path);
        // 2^26 rows of 6 doubles (3.2 GB) in a file of a few kilobytes: chunks never written.
        hsize_t dims[2] = {hsize_t{1} << 26, 6}, max[2] = {H5S_UNLIMITED, 6}, chunk[2] = {16, 6};
        hid_t space = H5Screate_simple(2, dims, max);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(dcpl, 2, chunk);
        H5Dclose(H5Dcreate2(f.id, "rows", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        H5Pset_deflate(dcpl, 4);
        H5Dclose(H5Dcreate2(f.id, "packed", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        // 2^32 x 2^32 elements: the count wraps to 0 in 64 bits.
        hsize_t wide[2] = {hsize_t{1} << 32, hsize_t{1} << 32}, wide_max[2] = {H5S_UNLIMITED, H5S_UNLIMITED};
        hid_t wide_space = H5Screate_simple(2, wide, wide_max);
        H5Dclose(H5Dcreate2(f.id, "wrapped", H5T_IEEE_F64LE, wide_space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        hsize_t names[1] = {hsize_t{1} << 40}, names_max[1] = {H5S_UNLIMITED}, name_chunk[1] = {64};
        hid_t names_space = H5Screate_simple(1, names, names_max);
        hid_t names_dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_chunk(names_dcpl, 1, name_chunk);
        hid_t text = H5Tcopy(H5T_C_S1);
        H5Tset_size(text, H5T_VARIABLE);
        H5Dclose(H5Dcreate2(f.id, "names", text, names_space, H5P_DEFAULT, names_dcpl, H5P_DEFAULT));
        for (hid_t id : {space, wide_space, names_space}) H5Sclose(id);
        for (hid_t id : {dcpl, names_dcpl}) H5Pclose(id);
        H5Tclose(text);
    }
    H5File f = H5File::open(path, false);
    EXPECT_CONTAINS(error_of([&] { f.read<double>("rows"); }),
                    "huge.h5: dataset rows declares 67108864x6 values (3221225472 bytes) but the file holds only 0 bytes");
    EXPECT_CONTAINS(error_of([&] { f.read<double>("packed"); }), "huge.h5: dataset packed declares 67108864x6 values");
    EXPECT_CONTAINS(error_of([&] { f.read<double>("wrapped"); }),
                    "huge.h5: wrapped declares shape 4294967296x4294967296, more values than any file holds");
    EXPECT_CONTAINS(error_of([&] { f.read_strings("names"); }), "huge.h5: dataset names declares 1099511627776 values");
}

TEST(Faults, ExternalStorageIsRefused) {
    TempDir dir;
    std::string secret = dir.file("secret.bin");
    write_bytes(secret, std::vector<char>(64, 'x'));
    std::string path = dir.file("external.h5");
    {
        RawFile f(path);
        hsize_t dims[1] = {8};
        hid_t space = H5Screate_simple(1, dims, nullptr);
        hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
        H5Pset_external(dcpl, secret.c_str(), 0, 64);
        H5Dclose(H5Dcreate2(f.id, "data", H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT));
        H5Sclose(space);
        H5Pclose(dcpl);
    }
    EXPECT_CONTAINS(error_of([&] { H5File::open(path, false).read<double>("data"); }),
                    "external.h5: dataset data keeps its data in another file (HDF5 external storage)");
}

// Fixed-length strings that fill their width (h5py's null-padded "S" type) keep
// their last character.
TEST(Faults, FixedLengthStringsKeepTheirLastCharacter) {
    TempDir dir;
    std::string path = dir.file("fixed.h5");
    {
        RawFile f(path);
        hid_t type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, 10);
        H5Tset_strpad(type, H5T_STR_NULLPAD);
        hsize_t dims[1] = {2};
        hid_t space = H5Screate_simple(1, dims, nullptr);
        const char names[] = "fc1.weightfc1.bias\0\0";
        hid_t ds = H5Dcreate2(f.id, "names", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, names);
        H5Dclose(ds);
        hid_t scalar = H5Screate(H5S_SCALAR);
        hid_t attr = H5Acreate2(f.id, "format", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
        H5Awrite(attr, type, "accordion.");
        H5Aclose(attr);
        H5Sclose(scalar);
        H5Sclose(space);
        H5Tclose(type);
    }
    H5File f = H5File::open(path, false);
    EXPECT_EQ(f.read_strings("names"), (std::vector<std::string>{"fc1.weight", "fc1.bias"}));
    EXPECT_EQ(f.read_attr_string("/", "format"), "accordion.");
}

// Datasets that must agree are compared before the larger one is read.
TEST(Faults, RowCountsAreComparedBeforeReading) {
    TempDir dir;
    std::string path = dir.file("grads.h5");
    {
        GradsWriter w(path, {"t", "t"}, {}, model(), false);
        for (int e = 0; e < 3; ++e) w.append_epoch(epoch(e));
    }
    {
        hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
        hid_t ds = H5Dopen2(f, "/epochs/norm", H5P_DEFAULT);
        hsize_t dims[2] = {hsize_t{1} << 26, 2};
        ASSERT_GE(H5Dset_extent(ds, dims), 0);
        H5Dclose(ds);
        H5Fclose(f);
    }
    EXPECT_CONTAINS(error_of([&] { read_grads(path); }),
                    "grads.h5: /epochs/lr has shape 3, expected 67108864 (one value per epoch of /epochs/norm)");
}

// The same checks hold for a file received as an image in memory.
TEST(Faults, FileImagesAreCheckedToo) {
    TempDir dir;
    std::string path = write_small(dir, "a.h5", [](H5File& f) { f.write_strings("/names", {"fc1.weight", "fc1.bias"}); });
    const std::vector<char> good = bytes_of(path);
    auto image = [](const std::vector<char>& bytes) { return std::vector<std::uint8_t>(bytes.begin(), bytes.end()); };
    H5File f = H5File::open_image(image(good), "sent.h5");
    EXPECT_EQ(read_header(f, "accordion.test", 1).provenance.producer, "test_io_faults 1");
    EXPECT_EQ(f.read_strings("/names"), (std::vector<std::string>{"fc1.weight", "fc1.bias"}));
    const size_t heap = find(good, "GCOL");
    const size_t record = find(good, le(14, 4) + le(heap, 8));
    ASSERT_NE(record, std::string::npos);
    std::vector<char> bad = good;
    bad[record] = 2;
    EXPECT_CONTAINS(error_of([&] { read_header(H5File::open_image(image(bad), "sent.h5"), "accordion.test", 1); }),
                    "sent.h5: attribute 'format' of / declares 2 bytes but its heap object holds 14");
}

// A lock's name is no output: while its run holds it, no program writes there, even
// with --force; a file at a lock's name that is not a lock (an output written there
// while no run held it) is never removed as a stale lock; and a holder's line is shown
// with its control bytes escaped.
TEST(Faults, ALockFileIsNeitherAnOutputNorRemovedUnlessItIsALock) {
    TempDir dir;
    const std::string out = dir.file("m.h5");
    const std::string lock = dir.file(".m.h5.lock");
    {
        OutputClaim running = claim_output(out, "train-dist", false);
        EXPECT_CONTAINS(error_of([&] { claim_output(lock, "regime-detect", true); }),
                        lock + ": is the lock file of a run writing its output (train-dist (process ");
    }
    // Not held, but not a lock either: left as it is, and the claim refused.
    {
        std::ofstream planted(lock, std::ios::binary);
        planted << std::string("\x89HDF\r\n\x1a\n", 8) << std::string(600, 'x');
    }
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "train-dist", false); }),
                    out + ": its lock file's name " + lock + " holds something other than a lock");
    EXPECT_EQ(fs::file_size(lock), 608u);
    fs::remove(lock);
    // A stale lock (its line, no holder) is replaced as before.
    { std::ofstream(lock) << "grad-dump (process 1 on elsewhere, started 2026-12-01 00:00:00 UTC)\n"; }
    EXPECT_NO_THROW(claim_output(out, "train-dist", false));
    // Control bytes in a holder's line are escaped, not passed to the terminal.
    { std::ofstream(lock, std::ios::binary) << "evil\x9b\x7f\xff (process 7 on h, started now)\n"; }
    const int fd = ::open(lock.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    EXPECT_CONTAINS(error_of([&] { claim_output(out, "train-dist", false); }),
                    "is being written by evil\\x9b\\x7f\\xff (process 7 on h, started now)");
    ::close(fd);
}
