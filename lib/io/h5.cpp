#include "io/h5.hpp"

#include "base/error.hpp"

#include <algorithm>
#include <atomic>
#include <limits>
#include <cstdlib>
#include <filesystem>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

namespace acc::io {
namespace {

// HDF5 prints its error stack to stderr by default; we report errors ourselves.
//
// HDF5 1.10 also closes every file still open when the process exits, and a file
// whose close failed (a full disk) stays on that list: closing it a second time
// crashes inside the library. Our writers always close explicitly and report a
// failed close, so the clean-up at exit is turned off before the library starts.
void silence_hdf5() {
    static const bool done = [] {
        H5dont_atexit();
        H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
        return true;
    }();
    (void)done;
}

// Objects are written without HDF5's creation and modification times, so that the
// same contents make the same bytes (a schedule from accordion.detect and one from
// regime-detect, two runs of one command); the files' "created" attribute says when.
// The filters of a dataset's creation properties, in order.
std::vector<H5Z_filter_t> filters_of(hid_t dcpl) {
    std::vector<H5Z_filter_t> out;
    for (int i = 0, n = H5Pget_nfilters(dcpl); i < n; ++i) {
        unsigned flags = 0;
        size_t values = 0;
        out.push_back(H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &values, nullptr, 0, nullptr, nullptr));
    }
    return out;
}

Handle untimed(hid_t property_class) {
    Handle plist(H5Pcreate(property_class), H5Pclose);
    H5Pset_obj_track_times(plist.get(), false);
    return plist;
}

// The innermost message on HDF5's error stack, e.g. "truncated file: eof = ...".
std::string innermost_hdf5_error() {
    std::string message;
    H5Ewalk2(
        H5E_DEFAULT, H5E_WALK_UPWARD,
        [](unsigned n, const H5E_error2_t* err, void* data) -> herr_t {
            if (n == 0 && err->desc) *static_cast<std::string*>(data) = err->desc;
            return 0;
        },
        &message);
    H5Eclear2(H5E_DEFAULT);
    // A failed system call comes with a time stamp, buffer addresses and the like;
    // the system's own words are what a user can act on.
    const std::string marker = "error message = '";
    size_t start = message.find(marker);
    if (start != std::string::npos) {
        start += marker.size();
        size_t end = message.find('\'', start);
        if (end != std::string::npos) return message.substr(start, end - start);
    }
    return message;
}

std::string type_class_name(H5T_class_t cls) {
    switch (cls) {
    case H5T_INTEGER: return "integers";
    case H5T_FLOAT: return "floating-point numbers";
    case H5T_STRING: return "strings";
    case H5T_ENUM: return "enumerated values";
    case H5T_COMPOUND: return "compound records";
    default: return "values of an unsupported type";
    }
}

// Writers use UTF-8; a reader takes the character set of the `stored` type, since
// HDF5 refuses to convert between ASCII and UTF-8.
Handle vlen_string_type(hid_t stored = -1) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5T_cset_t cset = stored >= 0 ? H5Tget_cset(stored) : H5T_CSET_UTF8;
    H5Tset_cset(type, cset == H5T_CSET_ASCII ? H5T_CSET_ASCII : H5T_CSET_UTF8);
    return Handle(type, H5Tclose);
}

// A null-terminated memory string type of `width` bytes with the character set of
// `stored` (HDF5 refuses to convert between ASCII and UTF-8).
Handle fixed_string_type(hid_t stored, size_t width) {
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), width);
    H5Tset_strpad(mem.get(), H5T_STR_NULLTERM);
    H5T_cset_t cset = H5Tget_cset(stored);
    if (cset == H5T_CSET_ASCII || cset == H5T_CSET_UTF8) H5Tset_cset(mem.get(), cset);
    return mem;
}

// Longest fixed-length string accepted; names and attributes are far shorter.
constexpr size_t kMaxFixedString = 1 << 20;
// More values than a dataset of any real file holds (2^48 doubles are 2 PiB);
// also keeps byte counts far from overflowing.
constexpr hsize_t kMaxElements = hsize_t{1} << 48;
// How far a filter may have shrunk a chunked dataset (deflate cannot pass ~1032:1).
constexpr hsize_t kMaxCompression = 1100;

}  // namespace

Handle& Handle::operator=(Handle&& other) noexcept {
    if (this != &other) {
        reset();
        id_ = other.id_;
        closer_ = other.closer_;
        other.id_ = -1;
    }
    return *this;
}

bool Handle::reset() {
    bool ok = true;
    if (id_ >= 0 && closer_) ok = closer_(id_) >= 0;
    id_ = -1;
    return ok;
}

hsize_t element_count(const Dims& dims) {
    hsize_t n = 1;
    for (hsize_t d : dims) {
        if (d == 0) return 0;
        if (n > std::numeric_limits<hsize_t>::max() / d) n = std::numeric_limits<hsize_t>::max();
        else n *= d;
    }
    return n;
}

std::string dims_text(const Dims& dims) {
    if (dims.empty()) return "a scalar";
    std::string out;
    for (size_t i = 0; i < dims.size(); ++i) {
        if (i) out += "x";
        out += std::to_string(dims[i]);
    }
    return out;
}

H5File H5File::create(const std::string& disk_path, const std::string& display_path) {
    silence_hdf5();
    Handle fcpl = untimed(H5P_FILE_CREATE);  // the root group's
    hid_t id = H5Fcreate(disk_path.c_str(), H5F_ACC_TRUNC, fcpl.get(), H5P_DEFAULT);
    if (id < 0) {
        std::string why = innermost_hdf5_error();
        throw FileError(display_path, "cannot create the file" + (why.empty() ? "" : " (" + why + ")"));
    }
    return H5File(Handle(id, H5Fclose), display_path);
}

H5File H5File::open(const std::string& disk_path, bool writable, const std::string& display_path) {
    silence_hdf5();
    const std::string& path = display_path.empty() ? disk_path : display_path;
    struct stat st {};
    if (::stat(disk_path.c_str(), &st) != 0) throw FileError(path, "no such file");
    if (S_ISDIR(st.st_mode)) throw FileError(path, "is a directory, not a file");
    if (st.st_size == 0) throw FileError(path, "the file is empty");
    htri_t is_hdf5 = H5Fis_hdf5(disk_path.c_str());
    innermost_hdf5_error();
    if (is_hdf5 <= 0) {
        if (::access(disk_path.c_str(), R_OK) != 0) throw FileError(path, "cannot be read (permission denied)");
        throw FileError(path, "not an HDF5 file");
    }
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
#if H5_VERSION_GE(1, 10, 7)
    if (!writable) H5Pset_file_locking(fapl.get(), false, true);
#endif
    hid_t id = H5Fopen(disk_path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, fapl.get());
    if (id < 0) {
        std::string why = innermost_hdf5_error();
        if (why.find("truncated") != std::string::npos)
            throw FileError(path, "the file is truncated (" + why + ")");
        throw FileError(path, "cannot open the HDF5 file" + (why.empty() ? "" : " (" + why + ")"));
    }
    return H5File(Handle(id, H5Fclose), path);
}

H5File H5File::open_image(const std::vector<std::uint8_t>& bytes, const std::string& display_path) {
    silence_hdf5();
    if (bytes.empty()) throw FileError(display_path, "the file is empty");
    Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
    // The core driver without a backing store reads the image in place of a file on disk.
    if (H5Pset_fapl_core(fapl.get(), 1 << 20, 0) < 0 ||
        H5Pset_file_image(fapl.get(), const_cast<std::uint8_t*>(bytes.data()), bytes.size()) < 0)
        throw FileError(display_path, "cannot open the file image (" + innermost_hdf5_error() + ")");
    // The core driver refuses a name that exists on disk; this one never does. The
    // name differs for every image, since HDF5 hands back the file already open
    // under a name instead of opening a second image.
    static std::atomic<unsigned long> images{0};
    const std::string name = "/proc/self/acc-file-image-" + std::to_string(images++);
    hid_t id = H5Fopen(name.c_str(), H5F_ACC_RDONLY, fapl.get());
    if (id < 0) {
        std::string why = innermost_hdf5_error();
        throw FileError(display_path, "cannot open the HDF5 file" + (why.empty() ? "" : " (" + why + ")"));
    }
    return H5File(Handle(id, H5Fclose), display_path);
}

void H5File::fail(const std::string& problem) const { throw FileError(path_, problem); }

void H5File::flush() {
    if (H5Fflush(file_.get(), H5F_SCOPE_LOCAL) < 0) fail("cannot write the file out (" + innermost_hdf5_error() + ")");
}

void H5File::close() {
    if (file_ && !file_.reset()) fail("cannot close the file (" + innermost_hdf5_error() + ")");
}

bool H5File::exists(const std::string& object) const {
    if (object == "/" || object.empty()) return true;
    // H5Lexists fails rather than answering "no" when an intermediate group is missing.
    std::string prefix;
    size_t start = object[0] == '/' ? 1 : 0;
    while (start <= object.size()) {
        size_t slash = object.find('/', start);
        std::string part = object.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        prefix += "/" + part;
        htri_t there = H5Lexists(file_.get(), prefix.c_str(), H5P_DEFAULT);
        if (there <= 0) {
            H5Eclear2(H5E_DEFAULT);
            return false;
        }
        if (slash == std::string::npos) break;
        start = slash + 1;
    }
    return true;
}

void H5File::create_group(const std::string& group) {
    if (exists(group)) return;
    create_parents(group);
    Handle gcpl = untimed(H5P_GROUP_CREATE);
    hid_t id = H5Gcreate2(file_.get(), group.c_str(), H5P_DEFAULT, gcpl.get(), H5P_DEFAULT);
    if (id < 0) fail("cannot create group " + group + " (" + innermost_hdf5_error() + ")");
    H5Gclose(id);
}

void H5File::create_parents(const std::string& path) {
    // HDF5's own intermediate groups would be created with times (the default).
    for (size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1))
        create_group(path.substr(0, slash));
}

bool H5File::is_dataset(const std::string& object) const {
    if (!exists(object)) return false;
    const hid_t d = H5Dopen2(file_.get(), object.c_str(), H5P_DEFAULT);
    if (d < 0) return false;
    H5Dclose(d);
    return true;
}

std::vector<std::string> H5File::list(const std::string& group) const {
    std::vector<std::string> names;
    Handle g(H5Gopen2(file_.get(), group.c_str(), H5P_DEFAULT), H5Gclose);
    if (!g) fail("group " + group + " is missing");
    hsize_t index = 0;
    herr_t status = H5Literate(
        g.get(), H5_INDEX_NAME, H5_ITER_INC, &index,
        [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
            static_cast<std::vector<std::string>*>(data)->push_back(name);
            return 0;
        },
        &names);
    if (status < 0) fail("cannot list group " + group + " (" + innermost_hdf5_error() + ")");
    return names;
}

Handle H5File::open_object(const std::string& object) const {
    if (!exists(object)) fail(object + " is missing");
    Handle h(H5Oopen(file_.get(), object.c_str(), H5P_DEFAULT), H5Oclose);
    if (!h) fail("cannot open " + object + " (" + innermost_hdf5_error() + ")");
    return h;
}

Handle H5File::open_dataset(const std::string& dataset) const {
    if (!exists(dataset)) fail("dataset " + dataset + " is missing");
    Handle h(H5Dopen2(file_.get(), dataset.c_str(), H5P_DEFAULT), H5Dclose);
    if (!h) fail(dataset + " is not a dataset");
    return h;
}

bool H5File::has_attr(const std::string& object, const std::string& name) const {
    if (!exists(object)) return false;
    htri_t there = H5Aexists_by_name(file_.get(), object.c_str(), name.c_str(), H5P_DEFAULT);
    H5Eclear2(H5E_DEFAULT);
    return there > 0;
}

namespace {

Handle replace_attr(hid_t object, const std::string& name, hid_t type, hid_t space) {
    if (H5Aexists(object, name.c_str()) > 0) H5Adelete(object, name.c_str());
    return Handle(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
}

}  // namespace

void H5File::write_attr(const std::string& object, const std::string& name, const std::string& value) {
    Handle obj = open_object(object);
    Handle type = vlen_string_type();
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attr = replace_attr(obj.get(), name, type.get(), space.get());
    const char* text = value.c_str();
    if (!attr || H5Awrite(attr.get(), type.get(), &text) < 0)
        fail("cannot write attribute " + name + " of " + object);
}

void H5File::write_attr(const std::string& object, const std::string& name, double value) {
    Handle obj = open_object(object);
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attr = replace_attr(obj.get(), name, H5T_IEEE_F64LE, space.get());
    if (!attr || H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value) < 0)
        fail("cannot write attribute " + name + " of " + object);
}

void H5File::write_attr(const std::string& object, const std::string& name, std::int64_t value) {
    Handle obj = open_object(object);
    Handle space(H5Screate(H5S_SCALAR), H5Sclose);
    Handle attr = replace_attr(obj.get(), name, H5T_STD_I64LE, space.get());
    if (!attr || H5Awrite(attr.get(), H5T_NATIVE_INT64, &value) < 0)
        fail("cannot write attribute " + name + " of " + object);
}

namespace {

constexpr const char* kRawVlenTag = "acc.raw-vlen";

// A conversion from a variable-length string to an opaque type of the same size as
// the stored element: it leaves the bytes as they are, so a read through it yields
// the (length, heap address, index) records exactly as the file holds them.
herr_t keep_raw_vlen(hid_t src, hid_t dst, H5T_cdata_t* cdata, size_t, size_t, size_t, void*, void*, hid_t) {
    if (cdata->command == H5T_CONV_INIT) {
        cdata->need_bkg = H5T_BKG_NO;
        char* tag = H5Tget_tag(dst);
        const bool ours = tag && std::strcmp(tag, kRawVlenTag) == 0;
        H5free_memory(tag);
        if (!ours || H5Tis_variable_str(src) <= 0 || H5Tget_size(src) != H5Tget_size(dst)) return -1;
    }
    return 0;
}

Handle raw_vlen_type(size_t size) {
    static const bool registered = [] {
        Handle vlen = vlen_string_type();
        Handle opaque(H5Tcreate(H5T_OPAQUE, 16), H5Tclose);
        H5Tset_tag(opaque.get(), kRawVlenTag);
        return H5Tregister(H5T_PERS_SOFT, "acc_keep_raw_vlen", vlen.get(), opaque.get(), keep_raw_vlen) >= 0;
    }();
    (void)registered;
    Handle type(H5Tcreate(H5T_OPAQUE, size), H5Tclose);
    H5Tset_tag(type.get(), kRawVlenTag);
    return type;
}

std::uint64_t little_endian(const std::uint8_t* p, size_t bytes) {
    std::uint64_t v = 0;
    for (size_t i = bytes; i-- > 0;) v = (v << 8) | p[i];
    return v;
}

}  // namespace

std::vector<std::uint8_t> H5File::file_bytes(haddr_t address, size_t size, const std::string& what) const {
    hsize_t file_size = 0;
    Handle fcpl(H5Fget_create_plist(file_.get()), H5Pclose);
    hsize_t userblock = 0;
    if (H5Fget_filesize(file_.get(), &file_size) < 0 || !fcpl || H5Pget_userblock(fcpl.get(), &userblock) < 0)
        fail("cannot read " + what + " (" + innermost_hdf5_error() + ")");
    if (address > file_size || userblock > file_size - address || size > file_size - address - userblock)
        fail(what + " points outside the file; the file is corrupt");
    const hsize_t offset = userblock + address;
    std::vector<std::uint8_t> out(size);
    Handle fapl(H5Fget_access_plist(file_.get()), H5Pclose);
    hid_t driver = fapl ? H5Pget_driver(fapl.get()) : -1;
    void* handle = nullptr;
    if (driver == H5FD_SEC2 && H5Fget_vfd_handle(file_.get(), fapl.get(), &handle) >= 0 && handle) {
        const int fd = *static_cast<int*>(handle);
        size_t done = 0;
        while (done < size) {
            ssize_t n = ::pread(fd, out.data() + done, size - done, static_cast<off_t>(offset + done));
            if (n <= 0) fail("cannot read " + what + " (the file is truncated?)");
            done += static_cast<size_t>(n);
        }
    } else if (driver == H5FD_CORE && H5Fget_vfd_handle(file_.get(), fapl.get(), &handle) >= 0 && handle) {
        // The core driver's handle points to its memory image's address.
        const std::uint8_t* image = *static_cast<const std::uint8_t* const*>(handle);
        if (!image) fail("cannot read " + what + " (no file image)");
        std::memcpy(out.data(), image + offset, size);
    } else {
        fail("cannot read " + what + " (unsupported HDF5 file driver)");
    }
    H5Eclear2(H5E_DEFAULT);
    return out;
}

void H5File::check_vlen_strings(hid_t object, bool is_attribute, size_t count, const std::string& what) const {
    if (count == 0) return;
    Handle fcpl(H5Fget_create_plist(file_.get()), H5Pclose);
    size_t sizeof_addr = 0, sizeof_size = 0;
    if (!fcpl || H5Pget_sizes(fcpl.get(), &sizeof_addr, &sizeof_size) < 0 || sizeof_addr > 8 || sizeof_size > 8)
        fail("cannot read " + what + " (" + innermost_hdf5_error() + ")");
    // On disk a variable-length value is its length (4 bytes), the address of a
    // global heap collection and the index of the object in it (4 bytes).
    const size_t record = 4 + sizeof_addr + 4;
    Handle raw = raw_vlen_type(record);
    std::vector<std::uint8_t> records = allocate<std::uint8_t>(what, count * record);
    herr_t status = is_attribute ? H5Aread(object, raw.get(), records.data())
                                 : H5Dread(object, raw.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, records.data());
    if (status < 0) fail("cannot read " + what + " (" + innermost_hdf5_error() + "); the file may be corrupt");

    // A collection: "GCOL", version 1, 3 reserved bytes, its size; then objects,
    // each an index (2 bytes), a reference count (2), 4 reserved bytes, the
    // object's size and its data padded to 8 bytes. Index 0 is free space.
    const size_t header = 8 + sizeof_size, object_header = 8 + sizeof_size;
    haddr_t loaded_address = HADDR_UNDEF;
    std::vector<std::uint8_t> collection;
    for (size_t i = 0; i < count; ++i) {
        const std::uint8_t* r = records.data() + i * record;
        const std::uint64_t length = little_endian(r, 4);
        const haddr_t address = little_endian(r + 4, sizeof_addr);
        const std::uint64_t index = little_endian(r + 4 + sizeof_addr, 4);
        if (length == 0) continue;  // an empty string reads nothing from the heap
        const std::string where = what + (count > 1 ? " (value " + std::to_string(i) + ")" : "");
        if (address != loaded_address) {
            std::vector<std::uint8_t> head = file_bytes(address, header, where);
            if (std::memcmp(head.data(), "GCOL", 4) != 0 || head[4] != 1)
                fail(where + " points to a damaged global heap; the file is corrupt");
            const std::uint64_t size = little_endian(head.data() + 8, sizeof_size);
            if (size < header || size > (std::uint64_t{1} << 32))
                fail(where + " points to a global heap of " + std::to_string(size) + " bytes; the file is corrupt");
            collection = file_bytes(address, static_cast<size_t>(size), where);
            loaded_address = address;
        }
        bool found = false;
        size_t at = header;
        while (at + object_header <= collection.size()) {
            const std::uint64_t id = little_endian(collection.data() + at, 2);
            const std::uint64_t size = little_endian(collection.data() + at + 8, sizeof_size);
            if (id == 0) {
                // Free space: libhdf5 skips `size` bytes from the object's start
                // (and would loop for ever on a size of zero).
                if (size < object_header || size > collection.size() - at)
                    fail(where + " points to a damaged global heap; the file is corrupt");
                at += static_cast<size_t>(size);
                continue;
            }
            if (size > collection.size() - at - object_header)
                fail(where + ": global heap object " + std::to_string(id) + " runs past its collection; the file is corrupt");
            if (id == index) {
                if (size != length)
                    fail(where + " declares " + std::to_string(length) + " bytes but its heap object holds " +
                         std::to_string(size) + "; the file is corrupt");
                found = true;
            }
            at += object_header + ((size + 7) / 8) * 8;
        }
        if (!found) fail(where + " points to a missing global heap object; the file is corrupt");
    }
}

namespace {

struct OpenAttr {
    Handle attr;
    Handle type;
    hssize_t points = 0;
};

}  // namespace

static OpenAttr open_attr(const H5File& file, const std::string& object, const std::string& name) {
    if (!file.has_attr(object, name)) file.fail("attribute '" + name + "' of " + object + " is missing");
    OpenAttr a;
    a.attr = Handle(H5Aopen_by_name(file.id(), object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    if (!a.attr) file.fail("cannot open attribute '" + name + "' of " + object);
    a.type = Handle(H5Aget_type(a.attr.get()), H5Tclose);
    Handle space(H5Aget_space(a.attr.get()), H5Sclose);
    a.points = H5Sget_simple_extent_npoints(space.get());
    if (a.points != 1) file.fail("attribute '" + name + "' of " + object + " should hold one value, not " +
                                 std::to_string(a.points));
    return a;
}

std::string H5File::read_attr_string(const std::string& object, const std::string& name) const {
    OpenAttr a = open_attr(*this, object, name);
    if (H5Tget_class(a.type.get()) != H5T_STRING)
        fail("attribute '" + name + "' of " + object + " should be a string");
    if (H5Tis_variable_str(a.type.get()) > 0) {
        check_vlen_strings(a.attr.get(), true, 1, "attribute '" + name + "' of " + object);
        Handle mem = vlen_string_type(a.type.get());
        char* text = nullptr;
        if (H5Aread(a.attr.get(), mem.get(), &text) < 0 || !text)
            fail("cannot read attribute '" + name + "' of " + object);
        std::string out(text);
        H5free_memory(text);
        return out;
    }
    size_t size = H5Tget_size(a.type.get());
    if (size == 0 || size > kMaxFixedString)
        fail("attribute '" + name + "' of " + object + " declares strings of " + std::to_string(size) + " bytes");
    // One byte more than the stored width: a string that fills its width (h5py's
    // null-padded "S" type) keeps its last character next to the terminator.
    std::string out(size + 1, '\0');
    Handle mem = fixed_string_type(a.type.get(), size + 1);
    if (H5Aread(a.attr.get(), mem.get(), out.data()) < 0) fail("cannot read attribute '" + name + "' of " + object);
    out.resize(std::min(out.size(), out.find('\0')));
    return out;
}

double H5File::read_attr_double(const std::string& object, const std::string& name) const {
    OpenAttr a = open_attr(*this, object, name);
    H5T_class_t cls = H5Tget_class(a.type.get());
    if (cls != H5T_FLOAT && cls != H5T_INTEGER)
        fail("attribute '" + name + "' of " + object + " should be a number, not " + type_class_name(cls));
    double value = 0;
    if (H5Aread(a.attr.get(), H5T_NATIVE_DOUBLE, &value) < 0) fail("cannot read attribute '" + name + "' of " + object);
    return value;
}

std::int64_t H5File::read_attr_int(const std::string& object, const std::string& name) const {
    OpenAttr a = open_attr(*this, object, name);
    H5T_class_t cls = H5Tget_class(a.type.get());
    if (cls != H5T_INTEGER)
        fail("attribute '" + name + "' of " + object + " should be an integer, not " + type_class_name(cls));
    std::int64_t value = 0;
    if (H5Aread(a.attr.get(), H5T_NATIVE_INT64, &value) < 0) fail("cannot read attribute '" + name + "' of " + object);
    return value;
}

void H5File::write_raw(const std::string& dataset, hid_t file_type, hid_t mem_type, const void* data,
                       const Dims& dims, int gzip_level) {
    if (exists(dataset)) H5Ldelete(file_.get(), dataset.c_str(), H5P_DEFAULT);
    Handle space(dims.empty() ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
                 H5Sclose);
    Handle dcpl = untimed(H5P_DATASET_CREATE);
    // Numbers are written with a Fletcher-32 checksum per chunk, which HDF5 (and
    // h5py) verify on every read: a flipped byte is an error, not another number.
    // Strings and scalars cannot be chunked; their damage shows as a wrong name.
    const bool numeric = H5Tget_class(file_type) != H5T_STRING;
    if ((numeric || gzip_level > 0) && !dims.empty() && element_count(dims) > 0) {
        // Chunks of at most ~1 Mi elements, cut along the first dimension.
        Dims chunk = dims;
        hsize_t row = element_count(dims) / dims[0];
        chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], (hsize_t{1} << 20) / std::max<hsize_t>(row, 1)));
        H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
        if (numeric) H5Pset_fletcher32(dcpl.get());
        if (gzip_level > 0) H5Pset_deflate(dcpl.get(), static_cast<unsigned>(gzip_level));
    }
    create_parents(dataset);
    Handle ds(H5Dcreate2(file_.get(), dataset.c_str(), file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
    if (!ds) fail("cannot create dataset " + dataset + " (" + innermost_hdf5_error() + ")");
    if (element_count(dims) > 0 && H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
        fail("cannot write dataset " + dataset + " (" + innermost_hdf5_error() + ")");
}

void H5File::write_strings(const std::string& dataset, const std::vector<std::string>& values) {
    std::vector<const char*> pointers;
    pointers.reserve(values.size());
    for (const auto& v : values) pointers.push_back(v.c_str());
    Handle type = vlen_string_type();
    write_raw(dataset, type.get(), type.get(), pointers.data(), Dims{values.size()}, 0);
}

Dims H5File::shape(const std::string& dataset) const {
    Handle ds = open_dataset(dataset);
    Handle space(H5Dget_space(ds.get()), H5Sclose);
    int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 0) fail("cannot read the shape of " + dataset);
    if (rank > H5S_MAX_RANK) fail(dataset + " declares " + std::to_string(rank) + " dimensions");
    Dims dims(static_cast<size_t>(rank));
    if (H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0) fail("cannot read the shape of " + dataset);
    if (element_count(dims) > kMaxElements)
        fail(dataset + " declares shape " + dims_text(dims) + ", more values than any file holds (the file is corrupt)");
    return dims;
}

size_t H5File::checked_elements(const std::string& dataset, const Dims& dims) const {
    const hsize_t elements = element_count(dims);
    if (elements > kMaxElements)
        fail(dataset + " declares shape " + dims_text(dims) + ", more values than any file holds (the file is corrupt)");
    Handle ds = open_dataset(dataset);
    Handle dcpl(H5Dget_create_plist(ds.get()), H5Pclose);
    if (!dcpl) fail("cannot read the storage properties of " + dataset + " (" + innermost_hdf5_error() + ")");
    // Data in another file would be read as if it were ours; refuse rather than follow it.
    if (H5Pget_external_count(dcpl.get()) != 0)
        fail("dataset " + dataset + " keeps its data in another file (HDF5 external storage), which is not accepted");
    H5D_layout_t layout = H5Pget_layout(dcpl.get());
    if (layout != H5D_COMPACT && layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED)
        fail("dataset " + dataset + " uses an unsupported storage layout (only compact, contiguous and chunked "
             "datasets are accepted)");
    if (elements == 0) return 0;
    Handle type(H5Dget_type(ds.get()), H5Tclose);
    const hsize_t value_bytes = std::max<size_t>(H5Tget_size(type.get()), 1);
    const hsize_t declared = elements * value_bytes;  // cannot overflow: elements <= kMaxElements
    const hsize_t stored = H5Dget_storage_size(ds.get());
    hsize_t file_bytes = 0;
    if (H5Fget_filesize(file_.get(), &file_bytes) < 0) file_bytes = std::numeric_limits<hsize_t>::max();
    H5Eclear2(H5E_DEFAULT);
    const std::string declared_text = "declares " + dims_text(dims) + " values (" + std::to_string(declared) + " bytes)";
    if (stored > file_bytes)
        fail("dataset " + dataset + " " + declared_text + " stored in " + std::to_string(stored) +
             " bytes, more than the whole file (" + std::to_string(file_bytes) + " bytes); the file is corrupt");
    // Compressed: a checksum alone adds 4 bytes a chunk.
    bool filtered = false;
    if (layout == H5D_CHUNKED)
        for (H5Z_filter_t id : filters_of(dcpl.get())) filtered = filtered || id != H5Z_FILTER_FLETCHER32;
    // Compression shrinks data at most ~1000-fold (deflate's limit); without a
    // filter every declared byte must be in the file.
    const hsize_t can_hold = filtered ? stored * kMaxCompression + (hsize_t{1} << 16) : stored;
    if (declared > can_hold)
        fail("dataset " + dataset + " " + declared_text + " but the file holds only " + std::to_string(stored) +
             " bytes of it; the file is truncated or corrupt");
    return static_cast<size_t>(elements);
}

bool H5File::has_checksum(const std::string& dataset) const {
    Handle ds = open_dataset(dataset);
    Handle dcpl(H5Dget_create_plist(ds.get()), H5Pclose);
    if (!dcpl || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return false;
    const std::vector<H5Z_filter_t> filters = filters_of(dcpl.get());
    return std::find(filters.begin(), filters.end(), H5Z_FILTER_FLETCHER32) != filters.end();
}

void H5File::read_raw(const std::string& dataset, hid_t mem_type, H5T_class_t expected, void* out,
                      size_t elements) const {
    Handle ds = open_dataset(dataset);
    Handle type(H5Dget_type(ds.get()), H5Tclose);
    H5T_class_t cls = H5Tget_class(type.get());
    if (cls != expected)
        fail("dataset " + dataset + " holds " + type_class_name(cls) + ", expected " + type_class_name(expected));
    if (elements == 0) return;
    if (H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0) {
        const std::string why = innermost_hdf5_error();
        if (why.find("Fletcher32") != std::string::npos)
            fail("dataset " + dataset + " fails its checksum (Fletcher-32): the file is damaged");
        fail("cannot read dataset " + dataset + " (" + why + "); the file may be truncated or corrupt");
    }
}

std::vector<std::string> H5File::read_strings(const std::string& dataset) const {
    Handle ds = open_dataset(dataset);
    Handle type(H5Dget_type(ds.get()), H5Tclose);
    if (H5Tget_class(type.get()) != H5T_STRING)
        fail("dataset " + dataset + " holds " + type_class_name(H5Tget_class(type.get())) + ", expected strings");
    Dims dims = shape(dataset);
    if (dims.size() != 1) fail("dataset " + dataset + " should be one-dimensional, not " + dims_text(dims));
    const size_t count = checked_elements(dataset, dims);
    std::vector<std::string> out = allocate<std::string>(dataset, count);
    if (count == 0) return out;
    if (H5Tis_variable_str(type.get()) > 0) {
        check_vlen_strings(ds.get(), false, count, "dataset " + dataset);
        Handle mem = vlen_string_type(type.get());
        std::vector<char*> pointers(count, nullptr);
        if (H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) < 0)
            fail("cannot read dataset " + dataset + " (" + innermost_hdf5_error() + ")");
        for (size_t i = 0; i < pointers.size(); ++i) {
            out[i] = pointers[i] ? pointers[i] : "";
            H5free_memory(pointers[i]);
        }
        return out;
    }
    size_t size = H5Tget_size(type.get());
    if (size == 0 || size > kMaxFixedString)
        fail("dataset " + dataset + " declares strings of " + std::to_string(size) + " bytes");
    // As for attributes: room for a terminator after a string that fills its width.
    const size_t width = size + 1;
    std::vector<char> buffer = allocate<char>(dataset, width * out.size());
    Handle mem = fixed_string_type(type.get(), width);
    if (H5Dread(ds.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()) < 0)
        fail("cannot read dataset " + dataset + " (" + innermost_hdf5_error() + ")");
    for (size_t i = 0; i < out.size(); ++i) {
        const char* start = buffer.data() + i * width;
        out[i].assign(start, strnlen(start, width));
    }
    return out;
}

void H5File::create_growing_raw(const std::string& dataset, hid_t type, const Dims& row_dims, hsize_t chunk_rows) {
    Dims dims{0}, max{H5S_UNLIMITED}, chunk{std::max<hsize_t>(chunk_rows, 1)};
    for (hsize_t d : row_dims) {
        dims.push_back(d);
        max.push_back(d);
        chunk.push_back(std::max<hsize_t>(d, 1));
    }
    Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), max.data()), H5Sclose);
    Handle dcpl = untimed(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data());
    if (H5Tget_class(type) != H5T_STRING) H5Pset_fletcher32(dcpl.get());  // as write_raw's
    create_parents(dataset);
    Handle ds(H5Dcreate2(file_.get(), dataset.c_str(), type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
    if (!ds) fail("cannot create dataset " + dataset + " (" + innermost_hdf5_error() + ")");
}

void H5File::append_raw(const std::string& dataset, hid_t mem_type, const void* data, hsize_t count) {
    if (count == 0) return;
    Handle ds = open_dataset(dataset);
    Dims dims = shape(dataset);
    Dims grown = dims;
    grown[0] += count;
    if (H5Dset_extent(ds.get(), grown.data()) < 0) fail("cannot extend dataset " + dataset);
    Handle space(H5Dget_space(ds.get()), H5Sclose);
    Dims start(dims.size(), 0), block = grown;
    start[0] = dims[0];
    block[0] = count;
    H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, start.data(), nullptr, block.data(), nullptr);
    Handle mem(H5Screate_simple(static_cast<int>(block.size()), block.data(), nullptr), H5Sclose);
    if (H5Dwrite(ds.get(), mem_type, mem.get(), space.get(), H5P_DEFAULT, data) < 0)
        fail("cannot append to dataset " + dataset + " (" + innermost_hdf5_error() + ")");
}

void H5File::set_rows(const std::string& dataset, hsize_t rows) {
    Handle ds = open_dataset(dataset);
    Dims dims = shape(dataset);
    dims[0] = rows;
    if (H5Dset_extent(ds.get(), dims.data()) < 0) fail("cannot resize dataset " + dataset);
}

}  // namespace acc::io
