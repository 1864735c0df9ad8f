// A thin RAII layer over HDF5's C API, used by every file format in lib/io.
//
// Every failure throws acc::FileError naming the file and the object, so format
// readers can stay short. HDF5's own error printing is switched off.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace acc::io {

using Dims = std::vector<hsize_t>;

/// Owns one HDF5 identifier.
class Handle {
public:
    using Closer = herr_t (*)(hid_t);
    Handle() = default;
    Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
    Handle(const Handle&) = delete;
    Handle& operator=(const Handle&) = delete;
    Handle(Handle&& other) noexcept { *this = std::move(other); }
    Handle& operator=(Handle&& other) noexcept;
    ~Handle() { reset(); }

    hid_t get() const { return id_; }
    explicit operator bool() const { return id_ >= 0; }
    /// Closes now; returns false if HDF5 reported an error while closing.
    bool reset();

private:
    hid_t id_ = -1;
    Closer closer_ = nullptr;
};

/// Element types the wrapper reads and writes.
template <class T> struct H5Type;
template <> struct H5Type<double> { static hid_t native() { return H5T_NATIVE_DOUBLE; } static constexpr H5T_class_t cls = H5T_FLOAT; };
template <> struct H5Type<float> { static hid_t native() { return H5T_NATIVE_FLOAT; } static constexpr H5T_class_t cls = H5T_FLOAT; };
template <> struct H5Type<std::int64_t> { static hid_t native() { return H5T_NATIVE_INT64; } static constexpr H5T_class_t cls = H5T_INTEGER; };
template <> struct H5Type<std::int32_t> { static hid_t native() { return H5T_NATIVE_INT32; } static constexpr H5T_class_t cls = H5T_INTEGER; };
template <> struct H5Type<std::int8_t> { static hid_t native() { return H5T_NATIVE_INT8; } static constexpr H5T_class_t cls = H5T_INTEGER; };
template <> struct H5Type<std::uint8_t> { static hid_t native() { return H5T_NATIVE_UINT8; } static constexpr H5T_class_t cls = H5T_INTEGER; };

/// An open HDF5 file. `path()` is the name used in error messages.
class H5File {
public:
    /// Creates (truncating) `disk_path`; messages name `display_path`.
    static H5File create(const std::string& disk_path, const std::string& display_path);
    /// Opens an existing file. Readers open without HDF5 file locking so that a file
    /// another process is still appending to can be read. Messages name
    /// `display_path` when given (a temporary copy of that file), else `path`.
    static H5File open(const std::string& path, bool writable, const std::string& display_path = "");
    /// Opens, read-only, a whole file held in memory (e.g. received from another
    /// process); `display_path` names it in messages.
    static H5File open_image(const std::vector<std::uint8_t>& bytes, const std::string& display_path);

    const std::string& path() const { return path_; }
    hid_t id() const { return file_.get(); }
    void flush();
    /// Closes the file, throwing if HDF5 could not write it out completely.
    void close();

    bool exists(const std::string& object) const;
    /// Whether `object` exists and is a dataset (not a group).
    bool is_dataset(const std::string& object) const;
    void create_group(const std::string& group);
    /// Names of the links directly below `group`, in creation or name order.
    std::vector<std::string> list(const std::string& group) const;

    // Attributes on any object ("/" for the root).
    bool has_attr(const std::string& object, const std::string& name) const;
    void write_attr(const std::string& object, const std::string& name, const std::string& value);
    void write_attr(const std::string& object, const std::string& name, double value);
    void write_attr(const std::string& object, const std::string& name, std::int64_t value);
    std::string read_attr_string(const std::string& object, const std::string& name) const;
    double read_attr_double(const std::string& object, const std::string& name) const;
    std::int64_t read_attr_int(const std::string& object, const std::string& name) const;

    // Whole datasets.
    template <class T>
    void write(const std::string& dataset, const std::vector<T>& data, const Dims& dims, int gzip_level = 0);
    void write_strings(const std::string& dataset, const std::vector<std::string>& values);
    Dims shape(const std::string& dataset) const;
    /// Whether `dataset` carries a Fletcher-32 checksum (every numeric dataset
    /// this wrapper writes does; HDF5 verifies it on every read).
    bool has_checksum(const std::string& dataset) const;
    /// Reads a numeric dataset, converting from any integer or float type of the
    /// same class as T (an integer field rejects floats and vice versa).
    template <class T>
    std::vector<T> read(const std::string& dataset, Dims* dims = nullptr) const;
    /// read() of a dataset that must have shape `expected`; otherwise fails with
    /// "<dataset> has shape 2x3, expected 4x3 (<what>)".
    template <class T>
    std::vector<T> read_shaped(const std::string& dataset, const Dims& expected, const std::string& what) const;
    std::vector<std::string> read_strings(const std::string& dataset) const;

    // Datasets that grow along their first dimension, one row block at a time.
    template <class T>
    void create_growing(const std::string& dataset, const Dims& row_dims, hsize_t chunk_rows);
    template <class T>
    void append_rows(const std::string& dataset, const std::vector<T>& rows, hsize_t count);
    /// Shrinks or grows the first dimension (used to drop rows after a resume).
    void set_rows(const std::string& dataset, hsize_t rows);

    [[noreturn]] void fail(const std::string& problem) const;

private:
    /// Creates the groups above `path` ("/a/b/c": /a and /a/b) that do not exist yet.
    void create_parents(const std::string& path);
    /// Checks, before anything is allocated, that `dataset` keeps its data in this
    /// file and that the file can hold what its shape declares; returns the number
    /// of elements.
    size_t checked_elements(const std::string& dataset, const Dims& dims) const;
    template <class T>
    std::vector<T> allocate(const std::string& dataset, size_t elements) const;
    /// Checks that each of the `count` variable-length strings of an attribute or
    /// dataset points inside a well-formed global heap object of the declared
    /// length, since libhdf5 1.10 copies whatever a damaged file declares.
    void check_vlen_strings(hid_t object, bool is_attribute, size_t count, const std::string& what) const;
    /// `size` bytes of the file from HDF5 address `address`; fails when outside the file.
    std::vector<std::uint8_t> file_bytes(haddr_t address, size_t size, const std::string& what) const;
    H5File(Handle file, std::string path) : file_(std::move(file)), path_(std::move(path)) {}
    Handle open_object(const std::string& object) const;
    Handle open_dataset(const std::string& dataset) const;
    void write_raw(const std::string& dataset, hid_t file_type, hid_t mem_type, const void* data,
                   const Dims& dims, int gzip_level);
    void read_raw(const std::string& dataset, hid_t mem_type, H5T_class_t expected, void* out,
                  size_t elements) const;
    void create_growing_raw(const std::string& dataset, hid_t type, const Dims& row_dims, hsize_t chunk_rows);
    void append_raw(const std::string& dataset, hid_t mem_type, const void* data, hsize_t count);

    Handle file_;
    std::string path_;
};

/// Number of elements of a shape (1 for a scalar); saturates at the largest
/// hsize_t instead of wrapping around.
hsize_t element_count(const Dims& dims);
/// "62x300" style text for messages.
std::string dims_text(const Dims& dims);

template <class T>
void H5File::write(const std::string& dataset, const std::vector<T>& data, const Dims& dims, int gzip_level) {
    if (element_count(dims) != data.size()) fail("internal error: " + dataset + " size does not match its shape");
    write_raw(dataset, H5Type<T>::native(), H5Type<T>::native(), data.data(), dims, gzip_level);
}

template <class T>
std::vector<T> H5File::allocate(const std::string& dataset, size_t elements) const {
    try {
        return std::vector<T>(elements);
    } catch (const std::bad_alloc&) {
        fail("not enough memory to read dataset " + dataset + " (" + std::to_string(elements) + " values)");
    }
}

template <class T>
std::vector<T> H5File::read(const std::string& dataset, Dims* dims) const {
    Dims d = shape(dataset);
    std::vector<T> out = allocate<T>(dataset, checked_elements(dataset, d));
    read_raw(dataset, H5Type<T>::native(), H5Type<T>::cls, out.data(), out.size());
    if (dims) *dims = d;
    return out;
}

template <class T>
std::vector<T> H5File::read_shaped(const std::string& dataset, const Dims& expected, const std::string& what) const {
    Dims d;
    std::vector<T> out = read<T>(dataset, &d);
    if (d != expected)
        fail(dataset + " has shape " + dims_text(d) + ", expected " + dims_text(expected) + " (" + what + ")");
    return out;
}

template <class T>
void H5File::create_growing(const std::string& dataset, const Dims& row_dims, hsize_t chunk_rows) {
    create_growing_raw(dataset, H5Type<T>::native(), row_dims, chunk_rows);
}

template <class T>
void H5File::append_rows(const std::string& dataset, const std::vector<T>& rows, hsize_t count) {
    append_raw(dataset, H5Type<T>::native(), rows.data(), count);
}

}  // namespace acc::io
