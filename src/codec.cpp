// onnx_light._native: the byte loops of the protobuf wire codec (DESIGN.md sections 4, 6).
//
// The pure-Python twin is onnx_light/onnx_core/_wire.py (+ _wire_gen.py); this file
// follows it rule for rule, so both produce the same messages, the same bytes and the
// same DecodeError (reason, byte offset, path). Per-class tables (field number -> slot
// offset, kind, child class) are handed over once from Python
// (onnx_light/onnx_core/_native_codec.py); values are stored straight into the slots of
// the slotted IR classes through the offsets of their member descriptors.
//
// Decoding is strict and bounded: every length prefix is checked against the bytes that
// remain before anything is allocated, varints are at most ten bytes, nesting is
// limited, field numbers above 2^29-1 are rejected. Unknown fields (and known fields
// with an unexpected wire type) are kept as raw bytes in `_unknown`.
//
// Encoding makes a size pass (sizes of every message, in pre-order) then a write pass
// into one preallocated bytes object; in "pieces" mode big bytes values (raw_data views)
// are not copied but returned as separate pieces. A message holding anything the native
// loop does not handle exactly like the twin (a subclass of str, a numpy scalar, a tuple
// instead of a list, an int beyond 64 bits, ...) is encoded by the Python twin and its
// bytes spliced in, so results and errors stay the twin's.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <Python.h>
#include <structmember.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace nb = nanobind;

namespace {

enum Kind : int {
    K_INT64 = 0,
    K_INT32 = 1,
    K_UINT64 = 2,
    K_BOOL = 3,
    K_ENUM = 4,
    K_FLOAT = 5,
    K_DOUBLE = 6,
    K_STRING = 7,
    K_BYTES = 8,
    K_MESSAGE = 9,
};

constexpr int WT_VARINT = 0, WT_FIXED64 = 1, WT_LEN = 2, WT_FIXED32 = 5;

int wire_of(int kind) {
    if (kind <= K_ENUM) return WT_VARINT;
    if (kind == K_FLOAT) return WT_FIXED32;
    if (kind == K_DOUBLE) return WT_FIXED64;
    return WT_LEN;
}

struct ClassPlan;

struct FieldPlan {
    uint32_t number = 0;
    int kind = 0;
    int wt = 0;  // the wire type a single value has
    bool repeated = false;
    bool packed = false;
    // op_type and domain strings are interned: a few distinct values, repeated on every node,
    // which the passes look up in dictionaries and compare with literals (by identity then)
    bool intern = false;
    Py_ssize_t offset = 0;
    PyObject *child_type = nullptr;  // strong reference, message fields only
    ClassPlan *child_plan = nullptr;  // resolved on first use
    std::string name;
    std::vector<Py_ssize_t> siblings;  // offsets of the other members of its oneof
    unsigned char key[5] = {0, 0, 0, 0, 0};  // the tag written by the encoder
    int key_len = 0;
    const char *kind_name = "";
};

struct ClassPlan {
    PyObject *type = nullptr;  // strong reference
    std::string name;          // type.__name__
    std::vector<FieldPlan> fields;  // write order (field-number order)
    std::vector<int> by_number;     // field number -> index into fields, or -1
};

struct State {
    bool ready = false;
    PyObject *decode_error = nullptr;
    PyObject *register_cb = nullptr;  // register(cls) -> bool
    PyObject *fallback_cb = nullptr;  // encode_one(msg) -> bytes (the twin)
    Py_ssize_t unknown_off = -1;
    Py_ssize_t implicit_off = -1;
    int max_depth = 100;
    Py_ssize_t zero_copy_min = 256;
    std::unordered_map<PyObject *, std::unique_ptr<ClassPlan>> plans;
};

State S;

constexpr int ENCODE_MAX_DEPTH = 5000;  // keeps the C stack bounded on hand-built trees

inline PyObject *&slot_ref(PyObject *obj, Py_ssize_t off) {
    return *reinterpret_cast<PyObject **>(reinterpret_cast<char *>(obj) + off);
}

inline void slot_set(PyObject *obj, Py_ssize_t off, PyObject *value /* new reference, stolen */) {
    PyObject *old = slot_ref(obj, off);
    slot_ref(obj, off) = value;
    Py_XDECREF(old);
}

inline void slot_clear(PyObject *obj, Py_ssize_t off) {
    PyObject *old = slot_ref(obj, off);
    slot_ref(obj, off) = nullptr;
    Py_XDECREF(old);
}

Py_ssize_t member_offset(PyObject *descr, PyObject *cls) {
    if (Py_TYPE(descr) != &PyMemberDescr_Type)
        throw nb::type_error("codec_register: slot descriptor expected");
    auto *md = reinterpret_cast<PyMemberDescrObject *>(descr);
    if (md->d_member->type != T_OBJECT_EX || (md->d_member->flags & READONLY))
        throw nb::type_error("codec_register: writable object slot expected");
    if (cls && !PyType_IsSubtype(reinterpret_cast<PyTypeObject *>(cls), md->d_common.d_type))
        throw nb::type_error("codec_register: slot descriptor of another class");
    return md->d_member->offset;
}

ClassPlan *plan_for(PyObject *type) {
    auto it = S.plans.find(type);
    if (it != S.plans.end()) return it->second.get();
    // not seen yet: ask Python to describe it (a subclass, or a class made later)
    PyObject *ok = PyObject_CallOneArg(S.register_cb, type);
    if (!ok) return nullptr;
    Py_DECREF(ok);
    it = S.plans.find(type);
    if (it != S.plans.end()) return it->second.get();
    PyErr_Format(PyExc_TypeError, "onnx_light codec: %R is not a message class", type);
    return nullptr;
}

inline ClassPlan *child_plan(FieldPlan &f) {
    if (!f.child_plan) f.child_plan = plan_for(f.child_type);
    return f.child_plan;
}

// Python int with value hi * 2**64 + lo (hi: bits 64..69 of a 10-byte varint)
PyObject *py_u70(uint64_t lo, uint32_t hi) {
    if (hi == 0) return PyLong_FromUnsignedLongLong(lo);
    PyObject *h = PyLong_FromUnsignedLong(hi);
    if (!h) return nullptr;
    PyObject *sixty_four = PyLong_FromLong(64);
    if (!sixty_four) {
        Py_DECREF(h);
        return nullptr;
    }
    PyObject *shifted = PyNumber_Lshift(h, sixty_four);
    Py_DECREF(h);
    Py_DECREF(sixty_four);
    if (!shifted) return nullptr;
    PyObject *l = PyLong_FromUnsignedLongLong(lo);
    if (!l) {
        Py_DECREF(shifted);
        return nullptr;
    }
    PyObject *r = PyNumber_Or(shifted, l);
    Py_DECREF(shifted);
    Py_DECREF(l);
    return r;
}

std::string u70_str(uint64_t lo, uint32_t hi) {
    if (hi == 0) return std::to_string(lo);
    PyObject *v = py_u70(lo, hi);
    std::string out = "?";
    if (v) {
        PyObject *s = PyObject_Str(v);
        if (s) {
            const char *c = PyUnicode_AsUTF8(s);
            if (c) out = c;
            Py_DECREF(s);
        }
        Py_DECREF(v);
    }
    PyErr_Clear();
    return out;
}

// ----------------------------------------------------------------------------
// decoding
// ----------------------------------------------------------------------------
struct Dec {
    const uint8_t *base = nullptr;
    PyObject *view = nullptr;  // 1-D unsigned-byte memoryview of the input
    bool failed = false;       // a DecodeError is pending (else a Python error is set)
    std::string reason;
    Py_ssize_t offset = 0;
    std::string path;  // suffix, built while unwinding

    bool fail(std::string r, Py_ssize_t at) {
        failed = true;
        reason = std::move(r);
        offset = at;
        return false;
    }
};

// float32 <-> double moving NaN payloads bit by bit: a hardware conversion quiets a
// signalling NaN. The float32 mantissa goes to the top of the double's and back, as
// _wire.py's _nan_from_f32_bits / _f32_bits_of_nan do.
inline double widen_f32(const uint8_t *src) {
    uint32_t bits;
    std::memcpy(&bits, src, 4);
    if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x7FFFFFu) != 0) {
        const uint64_t wide = (static_cast<uint64_t>(bits >> 31) << 63) | (static_cast<uint64_t>(0x7FF) << 52) |
                              (static_cast<uint64_t>(bits & 0x7FFFFFu) << 29);
        double v;
        std::memcpy(&v, &wide, 8);
        return v;
    }
    float x;
    std::memcpy(&x, &bits, 4);
    return static_cast<double>(x);
}

inline uint32_t narrow_f32_bits(double x) {
    uint32_t bits;
    if (!std::isnan(x)) {
        const float y = static_cast<float>(x);
        std::memcpy(&bits, &y, 4);
        return bits;
    }
    uint64_t wide;
    std::memcpy(&wide, &x, 8);
    uint32_t mantissa = static_cast<uint32_t>((wide >> 29) & 0x7FFFFFu);
    if (mantissa == 0) mantissa = 0x400000u;  // a payload lost to float64 stays a NaN
    return (static_cast<uint32_t>(wide >> 63) << 31) | 0x7F800000u | mantissa;
}

inline bool read_varint(Dec &d, Py_ssize_t &pos, Py_ssize_t end, uint64_t &lo, uint32_t &hi) {
    const Py_ssize_t start = pos;
    uint64_t result = 0;
    int shift = 0;
    hi = 0;
    for (;;) {
        if (pos >= end) return d.fail("truncated varint", start);
        const uint8_t b = d.base[pos++];
        if (shift < 64) result |= static_cast<uint64_t>(b & 0x7F) << shift;
        if (shift == 63) hi = static_cast<uint32_t>((b & 0x7F) >> 1);
        if (b < 0x80) {
            if (hi != 0) return d.fail("varint longer than 64 bits", start);
            lo = result;
            return true;
        }
        shift += 7;
        if (shift >= 70) return d.fail("varint longer than 10 bytes", start);
    }
}

// The Python value of a varint for a field kind, as the twin computes it.
PyObject *varint_value(int kind, uint64_t lo, uint32_t hi) {
    switch (kind) {
        case K_BOOL:
            return PyBool_FromLong((lo | hi) != 0);
        case K_INT32:
            return PyLong_FromLong(static_cast<long>(static_cast<int32_t>(static_cast<uint32_t>(lo))));
        case K_UINT64:
            return py_u70(lo, hi);
        default:  // int64, enum: values >= 2**63 lose 2**64
            if (hi == 0) return PyLong_FromLongLong(static_cast<long long>(lo));
            return py_u70(lo, hi - 1);
    }
}

bool list_append(PyObject *msg, Py_ssize_t off, PyObject *value /* stolen */) {
    PyObject *lst = slot_ref(msg, off);
    if (lst && PyList_CheckExact(lst)) {
        int rc = PyList_Append(lst, value);
        Py_DECREF(value);
        return rc == 0;
    }
    if (lst == nullptr || lst == Py_None) {
        PyObject *fresh = PyList_New(1);
        if (!fresh) {
            Py_DECREF(value);
            return false;
        }
        PyList_SET_ITEM(fresh, 0, value);
        slot_set(msg, off, fresh);
        return true;
    }
    PyObject *r = PyObject_CallMethod(lst, "append", "O", value);
    Py_DECREF(value);
    Py_XDECREF(r);
    return r != nullptr;
}

bool list_extend(PyObject *msg, Py_ssize_t off, PyObject *values /* stolen */) {
    PyObject *lst = slot_ref(msg, off);
    if (lst == nullptr || lst == Py_None) {
        slot_set(msg, off, values);
        return true;
    }
    if (PyList_CheckExact(lst)) {
        Py_ssize_t n = PyList_GET_SIZE(lst);
        int rc = PyList_SetSlice(lst, n, n, values);
        Py_DECREF(values);
        return rc == 0;
    }
    PyObject *r = PyObject_CallMethod(lst, "extend", "O", values);
    Py_DECREF(values);
    Py_XDECREF(r);
    return r != nullptr;
}

bool decode_msg(Dec &d, PyObject *msg, ClassPlan *p, Py_ssize_t pos, Py_ssize_t end, int depth);

bool read_packed(Dec &d, PyObject *msg, FieldPlan &f, Py_ssize_t &pos, Py_ssize_t end, Py_ssize_t start) {
    uint64_t n;
    uint32_t hi;
    if (!read_varint(d, pos, end, n, hi)) return false;
    if (hi || n > static_cast<uint64_t>(end - pos))
        return d.fail("packed length " + u70_str(n, hi) + " runs past the end of the message", start);
    const Py_ssize_t stop = pos + static_cast<Py_ssize_t>(n);
    PyObject *values;
    if (f.kind == K_FLOAT || f.kind == K_DOUBLE) {
        const Py_ssize_t width = f.kind == K_FLOAT ? 4 : 8;
        if (static_cast<Py_ssize_t>(n) % width)
            return d.fail("packed " + std::string(f.kind_name) + " length " + std::to_string(n) +
                              " is not a multiple of " + std::to_string(width),
                          start);
        const Py_ssize_t count = static_cast<Py_ssize_t>(n) / width;
        values = PyList_New(count);
        if (!values) return false;
        const uint8_t *src = d.base + pos;
        for (Py_ssize_t i = 0; i < count; ++i) {
            double v;
            if (width == 4) {
                v = widen_f32(src + 4 * i);
            } else {
                std::memcpy(&v, src + 8 * i, 8);
            }
            PyObject *item = PyFloat_FromDouble(v);
            if (!item) {
                Py_DECREF(values);
                return false;
            }
            PyList_SET_ITEM(values, i, item);
        }
    } else {
        values = PyList_New(0);
        if (!values) return false;
        Py_ssize_t q = pos;
        while (q < stop) {
            PyObject *item;
            const uint8_t b = d.base[q];
            if (b < 0x80) {
                ++q;
                item = f.kind == K_BOOL ? PyBool_FromLong(b != 0) : PyLong_FromLong(b);
            } else {
                uint64_t lo;
                uint32_t vhi;
                if (!read_varint(d, q, stop, lo, vhi)) {
                    Py_DECREF(values);
                    return false;
                }
                item = varint_value(f.kind, lo, vhi);
            }
            if (!item || PyList_Append(values, item) < 0) {
                Py_XDECREF(item);
                Py_DECREF(values);
                return false;
            }
            Py_DECREF(item);
        }
    }
    pos = stop;
    return list_extend(msg, f.offset, values);
}

bool prefix_child_error(Dec &d, PyObject *msg, FieldPlan &f) {
    if (!d.failed) return false;
    std::string where = "." + f.name;
    if (f.repeated) {
        PyObject *lst = slot_ref(msg, f.offset);
        Py_ssize_t n = 0;
        if (lst && lst != Py_None) {
            n = PyObject_Length(lst);
            if (n < 0) {
                PyErr_Clear();
                n = 0;
            }
        }
        where += "[" + std::to_string(n) + "]";
    }
    d.path = where + d.path;
    return false;
}

bool read_value(Dec &d, PyObject *msg, FieldPlan &f, Py_ssize_t &pos, Py_ssize_t end, int depth, Py_ssize_t start) {
    PyObject *value;
    const int kind = f.kind;
    if (kind <= K_ENUM) {
        if (pos < end && d.base[pos] < 0x80) {
            const uint8_t b = d.base[pos++];
            value = kind == K_BOOL ? PyBool_FromLong(b != 0) : PyLong_FromLong(b);
        } else {
            uint64_t lo;
            uint32_t hi;
            if (!read_varint(d, pos, end, lo, hi)) return false;
            value = varint_value(kind, lo, hi);
        }
    } else if (kind == K_FLOAT) {
        if (pos + 4 > end) return d.fail("truncated float", start);
        const double x = widen_f32(d.base + pos);
        pos += 4;
        value = PyFloat_FromDouble(x);
    } else if (kind == K_DOUBLE) {
        if (pos + 8 > end) return d.fail("truncated double", start);
        double x;
        std::memcpy(&x, d.base + pos, 8);
        pos += 8;
        value = PyFloat_FromDouble(x);
    } else {
        uint64_t n;
        uint32_t hi = 0;
        if (pos < end && d.base[pos] < 0x80) {
            n = d.base[pos++];
        } else if (!read_varint(d, pos, end, n, hi)) {
            return false;
        }
        if (hi || n > static_cast<uint64_t>(end - pos))
            return d.fail("length " + u70_str(n, hi) + " runs past the end of the message", start);
        const Py_ssize_t stop = pos + static_cast<Py_ssize_t>(n);
        if (kind == K_STRING) {
            value = PyUnicode_DecodeUTF8(reinterpret_cast<const char *>(d.base + pos), static_cast<Py_ssize_t>(n),
                                         nullptr);
            if (!value) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return false;
                PyErr_Clear();
                return d.fail("string field is not valid UTF-8", start);
            }
            if (f.intern) PyUnicode_InternInPlace(&value);
        } else if (kind == K_BYTES) {
            if (static_cast<Py_ssize_t>(n) >= S.zero_copy_min)
                value = PySequence_GetSlice(d.view, pos, stop);
            else
                value = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(d.base + pos),
                                                  static_cast<Py_ssize_t>(n));
        } else {
            ClassPlan *cp = child_plan(f);
            if (!cp) return false;
            PyTypeObject *ct = reinterpret_cast<PyTypeObject *>(f.child_type);
            if (f.repeated) {
                value = ct->tp_alloc(ct, 0);
                if (!value) return false;
            } else {
                value = slot_ref(msg, f.offset);
                if (value == nullptr || value == Py_None) {
                    value = ct->tp_alloc(ct, 0);
                    if (!value) return false;
                } else {
                    if (!PyObject_TypeCheck(value, ct)) {
                        PyErr_Format(PyExc_TypeError, "%s.%s holds %R, not a %s", Py_TYPE(msg)->tp_name,
                                     f.name.c_str(), value, ct->tp_name);
                        return false;
                    }
                    Py_INCREF(value);
                    Py_INCREF(Py_False);
                    slot_set(value, S.implicit_off, Py_False);
                }
            }
            if (!decode_msg(d, value, cp, pos, stop, depth + 1)) {
                Py_DECREF(value);
                return prefix_child_error(d, msg, f);
            }
        }
        pos = stop;
    }
    if (!value) return false;
    if (f.repeated) return list_append(msg, f.offset, value);
    for (Py_ssize_t other : f.siblings) slot_clear(msg, other);
    slot_set(msg, f.offset, value);
    return true;
}

bool keep_unknown(PyObject *msg, const uint8_t *base, Py_ssize_t start, Py_ssize_t pos) {
    PyObject *raw = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(base + start), pos - start);
    if (!raw) return false;
    return list_append(msg, S.unknown_off, raw);
}

bool decode_msg(Dec &d, PyObject *msg, ClassPlan *p, Py_ssize_t pos, Py_ssize_t end, int depth) {
    if (depth > S.max_depth)
        return d.fail("messages nested deeper than " + std::to_string(S.max_depth) + " levels", pos);
    const uint8_t *base = d.base;
    const Py_ssize_t nfields = static_cast<Py_ssize_t>(p->by_number.size());
    while (pos < end) {
        const Py_ssize_t start = pos;
        uint64_t tag;
        if (base[pos] < 0x80) {
            tag = base[pos++];
        } else {
            uint32_t hi;
            if (!read_varint(d, pos, end, tag, hi)) return false;
            if (hi || tag > 0xFFFFFFFFull) {
                // tag >> 3 of the full (up to 70-bit) value
                uint64_t lo3 = (tag >> 3) | (static_cast<uint64_t>(hi) << 61);
                return d.fail("field number " + u70_str(lo3, hi >> 3) + " is above the protobuf maximum", start);
            }
        }
        const uint64_t number = tag >> 3;
        const int wt = static_cast<int>(tag & 7);
        FieldPlan *f = nullptr;
        if (number < static_cast<uint64_t>(nfields)) {
            const int idx = p->by_number[number];
            if (idx >= 0) f = &p->fields[idx];
        }
        if (f) {
            if (wt == f->wt) {
                if (!read_value(d, msg, *f, pos, end, depth, start)) return false;
                continue;
            }
            if (wt == WT_LEN && f->repeated && f->kind <= K_DOUBLE) {
                if (!read_packed(d, msg, *f, pos, end, start)) return false;
                continue;
            }
        }
        if (number == 0) return d.fail("field number 0", start);
        uint64_t n;
        uint32_t hi;
        switch (wt) {
            case WT_VARINT:
                if (!read_varint(d, pos, end, n, hi)) return false;
                break;
            case WT_FIXED64:
                pos += 8;
                break;
            case WT_FIXED32:
                pos += 4;
                break;
            case WT_LEN:
                if (!read_varint(d, pos, end, n, hi)) return false;
                if (hi || n > static_cast<uint64_t>(end - pos))
                    return d.fail("length " + u70_str(n, hi) + " runs past the end of the message", start);
                pos += static_cast<Py_ssize_t>(n);
                break;
            default:
                return d.fail("unsupported wire type " + std::to_string(wt), start);
        }
        if (pos > end) return d.fail("truncated field", start);
        if (!keep_unknown(msg, base, start, pos)) return false;
    }
    if (pos != end) return d.fail("field runs past the end of the message", end);
    return true;
}

void require_ready() {
    if (!S.ready) throw std::runtime_error("onnx_light codec: codec_init was not called");
}

// decode_into(msg, view): decodes the 1-D byte memoryview `view` into msg (merging).
void decode_into(nb::handle msg, nb::handle view) {
    require_ready();
    ClassPlan *p = plan_for(reinterpret_cast<PyObject *>(Py_TYPE(msg.ptr())));
    if (!p) throw nb::python_error();
    Py_buffer buf;
    if (PyObject_GetBuffer(view.ptr(), &buf, PyBUF_SIMPLE) < 0) throw nb::python_error();
    Dec d;
    d.base = static_cast<const uint8_t *>(buf.buf);
    d.view = view.ptr();
    bool ok = decode_msg(d, msg.ptr(), p, 0, buf.len, 0);
    PyBuffer_Release(&buf);
    if (ok) return;
    if (!d.failed) throw nb::python_error();
    std::string path = p->name + d.path;
    nb::object reason = nb::steal(PyUnicode_FromStringAndSize(d.reason.data(), static_cast<Py_ssize_t>(d.reason.size())));
    nb::object where = nb::steal(PyUnicode_FromStringAndSize(path.data(), static_cast<Py_ssize_t>(path.size())));
    nb::object offset = nb::steal(PyLong_FromSsize_t(d.offset));
    if (!reason.is_valid() || !where.is_valid() || !offset.is_valid()) throw nb::python_error();
    PyObject *err = PyObject_CallFunctionObjArgs(S.decode_error, reason.ptr(), offset.ptr(), where.ptr(), nullptr);
    if (!err) throw nb::python_error();
    PyErr_SetObject(S.decode_error, err);
    Py_DECREF(err);
    throw nb::python_error();
}

// ----------------------------------------------------------------------------
// encoding
// ----------------------------------------------------------------------------
constexpr size_t SKIP = SIZE_MAX;  // an implicit, empty sub-message: not written
constexpr size_t FAILED = SIZE_MAX;

struct Entry {
    size_t size;
    PyObject *blob;  // bytes from the twin, or null
};

struct Hole {
    size_t at;        // position in the buffer
    PyObject *value;  // strong reference to the bytes-like value written there
    size_t len;
};

struct Enc {
    std::vector<Entry> entries;
    size_t stream_min = SIZE_MAX;  // bytes values at least this long become separate pieces
    size_t streamed = 0;
    std::vector<Hole> holes;
    ~Enc() {
        for (auto &e : entries) Py_XDECREF(e.blob);
        for (auto &h : holes) Py_XDECREF(h.value);
    }
    void truncate(size_t n) {
        for (size_t i = n; i < entries.size(); ++i) Py_XDECREF(entries[i].blob);
        entries.resize(n);
    }
};

inline size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        ++n;
    }
    return n;
}

// The unsigned 64-bit image of an int (or bool) value, as the twin's _varint(int(v))
// writes it; false (no error set) for anything the twin must handle.
inline bool as_varint(PyObject *v, uint64_t &out) {
    if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow == 0) {
            if (x == -1 && PyErr_Occurred()) {
                PyErr_Clear();
                return false;
            }
            out = static_cast<uint64_t>(x);
            return true;
        }
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
                PyErr_Clear();
                return false;
            }
            out = u;
            return true;
        }
        return false;
    }
    if (PyBool_Check(v)) {
        out = v == Py_True ? 1 : 0;
        return true;
    }
    return false;
}

// A bytes-like value the native loop writes exactly as the twin does.
struct BytesRef {
    const char *data = nullptr;
    size_t len = 0;
    Py_buffer view{};
    bool has_view = false;
    BytesRef() = default;
    BytesRef(const BytesRef &) = delete;
    BytesRef &operator=(const BytesRef &) = delete;
    ~BytesRef() {
        if (has_view) PyBuffer_Release(&view);
    }
    bool get(PyObject *v) {
        if (PyBytes_CheckExact(v)) {
            data = PyBytes_AS_STRING(v);
            len = static_cast<size_t>(PyBytes_GET_SIZE(v));
            return true;
        }
        if (PyMemoryView_Check(v) || PyByteArray_CheckExact(v)) {
            if (PyObject_GetBuffer(v, &view, PyBUF_SIMPLE) < 0) {
                PyErr_Clear();
                return false;
            }
            has_view = true;
            data = static_cast<const char *>(view.buf);
            len = static_cast<size_t>(view.len);
            return true;
        }
        return false;
    }
};

inline bool as_utf8(PyObject *v, const char *&data, size_t &len) {
    if (!PyUnicode_CheckExact(v)) return false;
    Py_ssize_t n;
    data = PyUnicode_AsUTF8AndSize(v, &n);
    if (!data) {
        PyErr_Clear();
        return false;
    }
    len = static_cast<size_t>(n);
    return true;
}

inline bool implicit_flag(PyObject *child, int &out) {
    PyObject *flag = slot_ref(child, S.implicit_off);
    if (flag == nullptr || flag == Py_False) {
        out = 0;
    } else if (flag == Py_True) {
        out = 1;
    } else {
        out = PyObject_IsTrue(flag);
        if (out < 0) return false;
    }
    return true;
}

enum class Sz { ok, fallback, error };

// Size pass over one field's value; adds to `total`.
Sz size_field(Enc &enc, FieldPlan &f, PyObject *v, size_t &total, int depth);
size_t size_msg(Enc &enc, PyObject *msg, ClassPlan *p, int depth);

// force: write the child even when it is empty (repeated items; singular children that
// are not `_implicit`); None for a singular child, whose `_implicit` flag decides.
Sz size_child(Enc &enc, FieldPlan &f, PyObject *child, bool repeated, size_t &total, int depth) {
    ClassPlan *cp = nullptr;
    auto it = S.plans.find(reinterpret_cast<PyObject *>(Py_TYPE(child)));
    if (it != S.plans.end()) {
        cp = it->second.get();
    } else {
        // only instances of registered message classes have the slots read below
        if (!PyObject_TypeCheck(child, reinterpret_cast<PyTypeObject *>(f.child_type))) return Sz::fallback;
        cp = plan_for(reinterpret_cast<PyObject *>(Py_TYPE(child)));
        if (!cp) {
            PyErr_Clear();
            return Sz::fallback;
        }
    }
    bool force = true;
    if (!repeated) {
        int implicit;
        if (!implicit_flag(child, implicit)) return Sz::error;
        force = !implicit;
    }
    const size_t idx = enc.entries.size();
    size_t n = size_msg(enc, child, cp, depth + 1);
    if (n == FAILED) return Sz::error;
    if (n == 0 && !force) {
        enc.truncate(idx + 1);
        enc.entries[idx].size = SKIP;
        return Sz::ok;
    }
    total += static_cast<size_t>(f.key_len) + varint_len(n) + n;
    return Sz::ok;
}

Sz size_field(Enc &enc, FieldPlan &f, PyObject *v, size_t &total, int depth) {
    const int kind = f.kind;
    const size_t key = static_cast<size_t>(f.key_len);
    if (f.repeated) {
        if (!PyList_Check(v)) return Sz::fallback;
        const Py_ssize_t n = PyList_GET_SIZE(v);
        if (n == 0) return Sz::ok;
        if (kind == K_MESSAGE) {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v); ++i) {
                PyObject *item = PyList_GET_ITEM(v, i);
                Py_INCREF(item);
                Sz r = size_child(enc, f, item, true, total, depth);
                Py_DECREF(item);
                if (r != Sz::ok) return r;
            }
            return Sz::ok;
        }
        if (kind == K_STRING) {
            for (Py_ssize_t i = 0; i < n; ++i) {
                const char *data;
                size_t len;
                if (!as_utf8(PyList_GET_ITEM(v, i), data, len)) return Sz::fallback;
                total += key + varint_len(len) + len;
            }
            return Sz::ok;
        }
        if (kind == K_BYTES) {
            for (Py_ssize_t i = 0; i < n; ++i) {
                BytesRef b;
                if (!b.get(PyList_GET_ITEM(v, i))) return Sz::fallback;
                if (b.len >= enc.stream_min) enc.streamed += b.len;
                total += key + varint_len(b.len) + b.len;
            }
            return Sz::ok;
        }
        size_t payload = 0;
        if (kind <= K_ENUM) {
            for (Py_ssize_t i = 0; i < n; ++i) {
                uint64_t u;
                if (!as_varint(PyList_GET_ITEM(v, i), u)) return Sz::fallback;
                payload += varint_len(u);
            }
        } else {
            for (Py_ssize_t i = 0; i < n; ++i) {
                PyObject *item = PyList_GET_ITEM(v, i);
                if (!PyFloat_CheckExact(item)) return Sz::fallback;
                if (kind == K_FLOAT && !f.packed) {
                    const double x = PyFloat_AS_DOUBLE(item);
                    // struct.pack("<f") refuses finite values that round to infinity
                    if (std::isinf(static_cast<float>(x)) && !std::isinf(x)) return Sz::fallback;
                }
            }
            payload = static_cast<size_t>(n) * (kind == K_FLOAT ? 4 : 8);
        }
        if (f.packed)
            total += key + varint_len(payload) + payload;
        else
            total += key * static_cast<size_t>(n) + payload;
        return Sz::ok;
    }
    switch (kind) {
        case K_MESSAGE:
            return size_child(enc, f, v, false, total, depth);
        case K_STRING: {
            const char *data;
            size_t len;
            if (!as_utf8(v, data, len)) return Sz::fallback;
            total += key + varint_len(len) + len;
            return Sz::ok;
        }
        case K_BYTES: {
            BytesRef b;
            if (!b.get(v)) return Sz::fallback;
            if (b.len >= enc.stream_min) enc.streamed += b.len;
            total += key + varint_len(b.len) + b.len;
            return Sz::ok;
        }
        case K_FLOAT: {
            if (!PyFloat_CheckExact(v)) return Sz::fallback;
            const double x = PyFloat_AS_DOUBLE(v);
            if (std::isinf(static_cast<float>(x)) && !std::isinf(x)) return Sz::fallback;
            total += key + 4;
            return Sz::ok;
        }
        case K_DOUBLE:
            if (!PyFloat_CheckExact(v)) return Sz::fallback;
            total += key + 8;
            return Sz::ok;
        default: {
            uint64_t u;
            if (!as_varint(v, u)) return Sz::fallback;
            total += key + varint_len(u);
            return Sz::ok;
        }
    }
}

// Size of msg's encoding (FAILED with a Python error set); records entries in pre-order.
size_t size_msg(Enc &enc, PyObject *msg, ClassPlan *p, int depth) {
    const size_t idx = enc.entries.size();
    enc.entries.push_back(Entry{0, nullptr});
    const size_t streamed0 = enc.streamed;
    size_t total = 0;
    Sz r = Sz::ok;
    if (depth > ENCODE_MAX_DEPTH) {
        PyErr_SetString(PyExc_RecursionError, "maximum recursion depth exceeded while encoding a message");
        return FAILED;
    }
    for (FieldPlan &f : p->fields) {
        PyObject *v = slot_ref(msg, f.offset);
        if (!v) continue;
        Py_INCREF(v);
        r = size_field(enc, f, v, total, depth);
        Py_DECREF(v);
        if (r != Sz::ok) break;
    }
    if (r == Sz::ok) {
        PyObject *unknown = slot_ref(msg, S.unknown_off);
        if (unknown && unknown != Py_None) {
            if (!PyList_CheckExact(unknown)) {
                r = Sz::fallback;
            } else {
                for (Py_ssize_t i = 0; i < PyList_GET_SIZE(unknown); ++i) {
                    PyObject *raw = PyList_GET_ITEM(unknown, i);
                    if (!PyBytes_CheckExact(raw)) {
                        r = Sz::fallback;
                        break;
                    }
                    total += static_cast<size_t>(PyBytes_GET_SIZE(raw));
                }
            }
        }
    }
    if (r == Sz::error) return FAILED;
    if (r == Sz::fallback) {
        enc.truncate(idx + 1);
        enc.streamed = streamed0;
        PyObject *blob = PyObject_CallOneArg(S.fallback_cb, msg);
        if (!blob) return FAILED;
        if (!PyBytes_CheckExact(blob)) {
            Py_DECREF(blob);
            PyErr_SetString(PyExc_TypeError, "codec fallback must return bytes");
            return FAILED;
        }
        enc.entries[idx].blob = blob;
        total = static_cast<size_t>(PyBytes_GET_SIZE(blob));
    }
    enc.entries[idx].size = total;
    return total;
}

struct Writer {
    char *out = nullptr;
    size_t cap = 0;
    size_t pos = 0;
    size_t cursor = 0;  // next entry
    bool bad = false;

    bool put(const void *src, size_t n) {
        if (n > cap - pos) return bad = true, false;
        if (n) std::memcpy(out + pos, src, n);
        pos += n;
        return true;
    }
    bool varint(uint64_t v) {
        unsigned char tmp[10];
        size_t n = 0;
        while (v >= 0x80) {
            tmp[n++] = static_cast<unsigned char>((v & 0x7F) | 0x80);
            v >>= 7;
        }
        tmp[n++] = static_cast<unsigned char>(v);
        return put(tmp, n);
    }
    bool key(const FieldPlan &f) { return put(f.key, static_cast<size_t>(f.key_len)); }
};

bool write_msg(Enc &enc, Writer &w, PyObject *msg, ClassPlan *p);

bool write_bytes(Enc &enc, Writer &w, const FieldPlan &f, PyObject *v) {
    BytesRef b;
    if (!b.get(v)) return w.bad = true, false;
    if (!w.key(f) || !w.varint(b.len)) return false;
    if (b.len >= enc.stream_min) {
        Py_INCREF(v);
        enc.holes.push_back(Hole{w.pos, v, b.len});
        return true;
    }
    return w.put(b.data, b.len);
}

bool write_child(Enc &enc, Writer &w, const FieldPlan &f, PyObject *child) {
    if (w.cursor >= enc.entries.size()) return w.bad = true, false;
    const Entry &e = enc.entries[w.cursor];
    if (e.size == SKIP) {
        ++w.cursor;
        return true;
    }
    auto it = S.plans.find(reinterpret_cast<PyObject *>(Py_TYPE(child)));
    if (it == S.plans.end() && !e.blob) return w.bad = true, false;
    if (!w.key(f) || !w.varint(e.size)) return false;
    const size_t start = w.pos;
    const size_t holes0 = enc.holes.size();
    if (!write_msg(enc, w, child, it == S.plans.end() ? nullptr : it->second.get())) return false;
    size_t written = w.pos - start;
    for (size_t i = holes0; i < enc.holes.size(); ++i) written += enc.holes[i].len;
    if (written != e.size) return w.bad = true, false;
    return true;
}

bool write_field(Enc &enc, Writer &w, const FieldPlan &f, PyObject *v) {
    const int kind = f.kind;
    if (f.repeated) {
        if (!PyList_Check(v)) return w.bad = true, false;
        const Py_ssize_t n = PyList_GET_SIZE(v);
        if (n == 0) return true;
        if (kind == K_MESSAGE) {
            for (Py_ssize_t i = 0; i < n; ++i)
                if (!write_child(enc, w, f, PyList_GET_ITEM(v, i))) return false;
            return true;
        }
        if (kind == K_STRING) {
            for (Py_ssize_t i = 0; i < n; ++i) {
                const char *data;
                size_t len;
                if (!as_utf8(PyList_GET_ITEM(v, i), data, len)) return w.bad = true, false;
                if (!w.key(f) || !w.varint(len) || !w.put(data, len)) return false;
            }
            return true;
        }
        if (kind == K_BYTES) {
            for (Py_ssize_t i = 0; i < n; ++i)
                if (!write_bytes(enc, w, f, PyList_GET_ITEM(v, i))) return false;
            return true;
        }
        if (f.packed) {
            size_t payload = 0;
            if (kind <= K_ENUM) {
                for (Py_ssize_t i = 0; i < n; ++i) {
                    uint64_t u;
                    if (!as_varint(PyList_GET_ITEM(v, i), u)) return w.bad = true, false;
                    payload += varint_len(u);
                }
            } else {
                payload = static_cast<size_t>(n) * (kind == K_FLOAT ? 4 : 8);
            }
            if (!w.key(f) || !w.varint(payload)) return false;
        }
        for (Py_ssize_t i = 0; i < n; ++i) {
            PyObject *item = PyList_GET_ITEM(v, i);
            if (!f.packed && !w.key(f)) return false;
            if (kind <= K_ENUM) {
                uint64_t u;
                if (!as_varint(item, u)) return w.bad = true, false;
                if (!w.varint(u)) return false;
            } else {
                if (!PyFloat_CheckExact(item)) return w.bad = true, false;
                const double x = PyFloat_AS_DOUBLE(item);
                if (kind == K_FLOAT) {
                    const uint32_t y = narrow_f32_bits(x);
                    if (!w.put(&y, 4)) return false;
                } else if (!w.put(&x, 8)) {
                    return false;
                }
            }
        }
        return true;
    }
    switch (kind) {
        case K_MESSAGE:
            return write_child(enc, w, f, v);
        case K_STRING: {
            const char *data;
            size_t len;
            if (!as_utf8(v, data, len)) return w.bad = true, false;
            return w.key(f) && w.varint(len) && w.put(data, len);
        }
        case K_BYTES:
            return write_bytes(enc, w, f, v);
        case K_FLOAT: {
            if (!PyFloat_CheckExact(v)) return w.bad = true, false;
            const uint32_t y = narrow_f32_bits(PyFloat_AS_DOUBLE(v));
            return w.key(f) && w.put(&y, 4);
        }
        case K_DOUBLE: {
            if (!PyFloat_CheckExact(v)) return w.bad = true, false;
            const double x = PyFloat_AS_DOUBLE(v);
            return w.key(f) && w.put(&x, 8);
        }
        default: {
            uint64_t u;
            if (!as_varint(v, u)) return w.bad = true, false;
            return w.key(f) && w.varint(u);
        }
    }
}

bool write_msg(Enc &enc, Writer &w, PyObject *msg, ClassPlan *p) {
    if (w.cursor >= enc.entries.size()) return w.bad = true, false;
    const Entry &e = enc.entries[w.cursor++];
    if (e.blob) return w.put(PyBytes_AS_STRING(e.blob), static_cast<size_t>(PyBytes_GET_SIZE(e.blob)));
    if (!p) return w.bad = true, false;
    for (const FieldPlan &f : p->fields) {
        PyObject *v = slot_ref(msg, f.offset);
        if (!v) continue;
        if (!write_field(enc, w, f, v)) return false;
    }
    PyObject *unknown = slot_ref(msg, S.unknown_off);
    if (unknown && unknown != Py_None) {
        if (!PyList_CheckExact(unknown)) return w.bad = true, false;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(unknown); ++i) {
            PyObject *raw = PyList_GET_ITEM(unknown, i);
            if (!PyBytes_CheckExact(raw)) return w.bad = true, false;
            if (!w.put(PyBytes_AS_STRING(raw), static_cast<size_t>(PyBytes_GET_SIZE(raw)))) return false;
        }
    }
    return true;
}

[[noreturn]] void changed_while_encoding() {
    throw std::runtime_error("onnx_light codec: the message changed while it was being encoded");
}

// Runs the size pass; returns the plan of the root and its size.
size_t size_root(Enc &enc, nb::handle msg, ClassPlan *&p) {
    require_ready();
    p = plan_for(reinterpret_cast<PyObject *>(Py_TYPE(msg.ptr())));
    if (!p) throw nb::python_error();
    size_t n = size_msg(enc, msg.ptr(), p, 0);
    if (n == FAILED) throw nb::python_error();
    return n;
}

nb::object encode(nb::handle msg) {
    Enc enc;
    ClassPlan *p;
    const size_t n = size_root(enc, msg, p);
    if (enc.entries[0].blob) return nb::borrow(enc.entries[0].blob);
    PyObject *out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
    if (!out) throw nb::python_error();
    nb::object result = nb::steal(out);
    Writer w;
    w.out = PyBytes_AS_STRING(out);
    w.cap = n;
    if (!write_msg(enc, w, msg.ptr(), p) || w.pos != n || w.cursor != enc.entries.size()) {
        if (PyErr_Occurred()) throw nb::python_error();
        changed_while_encoding();
    }
    return result;
}

size_t encoded_size(nb::handle msg) {
    Enc enc;
    ClassPlan *p;
    return size_root(enc, msg, p);
}

// (pieces, size): bytes values of at least `stream_min` bytes stay separate pieces (no
// copy); everything else is written into one buffer, returned as slices of it.
nb::tuple encode_pieces(nb::handle msg, size_t stream_min) {
    Enc enc;
    enc.stream_min = stream_min ? stream_min : 1;
    ClassPlan *p;
    const size_t n = size_root(enc, msg, p);
    if (enc.entries[0].blob) {
        nb::list pieces;
        pieces.append(nb::borrow(enc.entries[0].blob));
        return nb::make_tuple(pieces, n);
    }
    const size_t cap = n - enc.streamed;
    PyObject *out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(cap));
    if (!out) throw nb::python_error();
    nb::object buffer = nb::steal(out);
    Writer w;
    w.out = PyBytes_AS_STRING(out);
    w.cap = cap;
    if (!write_msg(enc, w, msg.ptr(), p) || w.pos != cap || w.cursor != enc.entries.size()) {
        if (PyErr_Occurred()) throw nb::python_error();
        changed_while_encoding();
    }
    nb::list pieces;
    if (enc.holes.empty()) {
        pieces.append(buffer);
        return nb::make_tuple(pieces, n);
    }
    nb::object mv = nb::steal(PyMemoryView_FromObject(out));
    if (!mv.is_valid()) throw nb::python_error();
    size_t prev = 0;
    for (const Hole &h : enc.holes) {
        if (h.at > prev) {
            PyObject *piece = PySequence_GetSlice(mv.ptr(), static_cast<Py_ssize_t>(prev), static_cast<Py_ssize_t>(h.at));
            if (!piece) throw nb::python_error();
            pieces.append(nb::steal(piece));
        }
        pieces.append(nb::borrow(h.value));
        prev = h.at;
    }
    if (cap > prev) {
        PyObject *piece = PySequence_GetSlice(mv.ptr(), static_cast<Py_ssize_t>(prev), static_cast<Py_ssize_t>(cap));
        if (!piece) throw nb::python_error();
        pieces.append(nb::steal(piece));
    }
    return nb::make_tuple(pieces, n);
}

// ----------------------------------------------------------------------------
// tables
// ----------------------------------------------------------------------------
void codec_init(nb::handle decode_error, nb::handle unknown_descr, nb::handle implicit_descr, nb::handle register_cb,
                nb::handle fallback_cb, int max_depth, Py_ssize_t zero_copy_min) {
    S.unknown_off = member_offset(unknown_descr.ptr(), nullptr);
    S.implicit_off = member_offset(implicit_descr.ptr(), nullptr);
    for (PyObject **target : {&S.decode_error, &S.register_cb, &S.fallback_cb}) Py_CLEAR(*target);
    S.decode_error = decode_error.inc_ref().ptr();
    S.register_cb = register_cb.inc_ref().ptr();
    S.fallback_cb = fallback_cb.inc_ref().ptr();
    S.max_depth = max_depth;
    S.zero_copy_min = zero_copy_min;
    S.ready = true;
}

// fields: sequence of (number, kind, repeated, packed, slot descriptor, name, child class
// or None, sibling slot descriptors), in field-number order.
void codec_register(nb::handle cls, const std::string &name, nb::sequence fields) {
    if (!PyType_Check(cls.ptr())) throw nb::type_error("codec_register: a class expected");
    auto plan = std::make_unique<ClassPlan>();
    plan->type = cls.inc_ref().ptr();
    plan->name = name;
    uint32_t max_number = 0;
    for (nb::handle row : fields) {
        if (!PyTuple_Check(row.ptr())) throw nb::type_error("codec_register: 8-tuples expected");
        nb::tuple t = nb::borrow<nb::tuple>(row);
        if (t.size() != 8) throw nb::value_error("codec_register: 8-tuples expected");
        FieldPlan f;
        f.number = nb::cast<uint32_t>(t[0]);
        f.kind = nb::cast<int>(t[1]);
        if (f.number == 0 || f.number > (1u << 29) - 1 || f.kind < 0 || f.kind > K_MESSAGE)
            throw nb::value_error("codec_register: bad field number or kind");
        f.repeated = nb::cast<bool>(t[2]);
        f.packed = nb::cast<bool>(t[3]);
        f.offset = member_offset(t[4].ptr(), cls.ptr());
        f.name = nb::cast<std::string>(t[5]);
        f.intern = f.kind == K_STRING && !f.repeated && (f.name == "op_type" || f.name == "domain");
        if (f.kind == K_MESSAGE) {
            if (!PyType_Check(t[6].ptr())) throw nb::type_error("codec_register: message field without a class");
            f.child_type = t[6].inc_ref().ptr();
        }
        for (nb::handle s : nb::borrow<nb::sequence>(t[7])) f.siblings.push_back(member_offset(s.ptr(), cls.ptr()));
        f.wt = wire_of(f.kind);
        static const char *names[] = {"int64", "int32", "uint64", "bool", "enum",
                                      "float", "double", "string", "bytes", "message"};
        f.kind_name = names[f.kind];
        const bool len_wire = f.packed || f.kind >= K_STRING;
        uint64_t key = (static_cast<uint64_t>(f.number) << 3) | static_cast<uint64_t>(len_wire ? WT_LEN : f.wt);
        while (key >= 0x80) {
            f.key[f.key_len++] = static_cast<unsigned char>((key & 0x7F) | 0x80);
            key >>= 7;
        }
        f.key[f.key_len++] = static_cast<unsigned char>(key);
        if (f.number > max_number) max_number = f.number;
        plan->fields.push_back(std::move(f));
    }
    if (max_number > 4096) throw nb::value_error("codec_register: field numbers above 4096 are not supported");
    plan->by_number.assign(max_number + 1, -1);
    for (size_t i = 0; i < plan->fields.size(); ++i) {
        int &slot = plan->by_number[plan->fields[i].number];
        if (slot >= 0) throw nb::value_error("codec_register: duplicate field number");
        slot = static_cast<int>(i);
    }
    auto it = S.plans.find(cls.ptr());
    if (it != S.plans.end()) {
        // replacing a plan would leave dangling child_plan pointers: keep the first one
        Py_DECREF(plan->type);
        for (auto &f : plan->fields) Py_XDECREF(f.child_type);
        return;
    }
    S.plans.emplace(cls.ptr(), std::move(plan));
}

bool codec_registered(nb::handle cls) { return S.plans.count(cls.ptr()) != 0; }

// slot_rows(objs, descriptors, defaults): for each object of the list objs, the tuple of its
// slots' values (the descriptors' slots, in order), the default where a slot is unset: what
// getattr(obj, name, default) gives each, without the AttributeError an unset slot costs
// (its message is formatted, then dropped). Each object must be an instance of the class
// each descriptor belongs to (TypeError otherwise: a foreign object's memory is not read).
nb::object slot_rows(nb::handle objs, nb::handle descriptors, nb::handle defaults) {
    PyObject *list = objs.ptr(), *descrs = descriptors.ptr(), *dflts = defaults.ptr();
    if (!PyList_Check(list)) throw nb::type_error("slot_rows: objs must be a list");
    if (!PyTuple_Check(descrs) || !PyTuple_Check(dflts) || PyTuple_GET_SIZE(descrs) != PyTuple_GET_SIZE(dflts))
        throw nb::type_error("slot_rows: descriptors and defaults must be tuples of one length");
    const Py_ssize_t k = PyTuple_GET_SIZE(descrs);
    std::vector<Py_ssize_t> offsets(static_cast<size_t>(k));
    std::vector<PyTypeObject *> owners(static_cast<size_t>(k));
    for (Py_ssize_t i = 0; i < k; ++i) {
        PyObject *d = PyTuple_GET_ITEM(descrs, i);
        if (Py_TYPE(d) != &PyMemberDescr_Type)
            throw nb::type_error("slot_rows: slot descriptors expected");
        auto *md = reinterpret_cast<PyMemberDescrObject *>(d);
        if (md->d_member->type != T_OBJECT_EX) throw nb::type_error("slot_rows: object slots expected");
        offsets[static_cast<size_t>(i)] = md->d_member->offset;
        owners[static_cast<size_t>(i)] = md->d_common.d_type;
    }
    const Py_ssize_t n = PyList_GET_SIZE(list);
    nb::object out = nb::steal(PyList_New(n));
    if (!out.is_valid()) throw nb::python_error();
    for (Py_ssize_t j = 0; j < n; ++j) {
        PyObject *obj = PyList_GET_ITEM(list, j);
        PyObject *row = PyTuple_New(k);
        if (!row) throw nb::python_error();
        PyList_SET_ITEM(out.ptr(), j, row);  // owned by out from here (its unset items are NULL)
        for (Py_ssize_t i = 0; i < k; ++i) {
            if (!PyObject_TypeCheck(obj, owners[static_cast<size_t>(i)]))
                throw nb::type_error("slot_rows: an object is not of its descriptors' class");
            PyObject *v = slot_ref(obj, offsets[static_cast<size_t>(i)]);
            if (!v) v = PyTuple_GET_ITEM(dflts, i);
            Py_INCREF(v);
            PyTuple_SET_ITEM(row, i, v);
        }
    }
    return out;
}

}  // namespace

void bind_codec(nb::module_ &m) {
    m.def("codec_init", &codec_init, nb::arg("decode_error"), nb::arg("unknown_slot"), nb::arg("implicit_slot"),
          nb::arg("register"), nb::arg("fallback"), nb::arg("max_depth"), nb::arg("zero_copy_min"),
          "Sets the codec's shared state: DecodeError, the Message base slots, callbacks, limits.");
    m.def("codec_register", &codec_register, nb::arg("cls"), nb::arg("name"), nb::arg("fields"),
          "Registers the field table of one message class.");
    m.def("codec_registered", &codec_registered, nb::arg("cls"));
    m.def("slot_rows", &slot_rows, nb::arg("objs"), nb::arg("descriptors"), nb::arg("defaults"),
          "[tuple(getattr(o, d.__name__, default) ...) for o in objs]: slot reads without AttributeErrors.");
    m.def("decode_into", &decode_into, nb::arg("msg"), nb::arg("view"),
          "Decodes a 1-D byte memoryview into msg (merging); raises DecodeError.");
    m.def("encode", &encode, nb::arg("msg"), "The wire-format bytes of msg.");
    m.def("encoded_size", &encoded_size, nb::arg("msg"), "len(encode(msg)).");
    m.def("encode_pieces", &encode_pieces, nb::arg("msg"), nb::arg("stream_min"),
          "(pieces, size): the encoding as bytes-like pieces; big bytes values are not copied.");
    // the codec revision: 2 = float NaN payloads kept bit for bit, varints over 64 bits refused
    m.attr("CODEC_REVISION") = 2;
}
