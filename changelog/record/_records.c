/* The append path's record encoder: Kafka v2 records of (key, value) pairs in one C loop.
 *
 * encode_plain(pairs, prefix, require_keys=False) -> bytearray
 *
 * Lays down one record per pair, in order, after `prefix` zero bytes (room for the
 * caller's 61-byte batch header): length (zigzag varint), attributes 0, timestamp
 * delta 0, offset delta = the pair's index, key length (-1: null) and key, value
 * length (-1: null) and value, header count 0.  The same bytes as the pure-Python
 * reference, changelog.record.body.encode_body, for records without headers whose
 * timestamps all equal the batch's base timestamp (tests hold them equal).
 *
 * `pairs` must be a list or tuple of exact 2-tuples of exact bytes or None, or a dict of
 * exact bytes or None to exact bytes or None (one record per entry, in the dict's order);
 * anything else raises TypeError naming the index, and the caller reports it in its own terms.
 * With `require_keys` true a None key raises ValueError naming the index (a compacted
 * log's rule, checked here for free rather than in a second pass over the pairs).
 * Nothing else is checked here (the caller bounds the count by Kafka's limits).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static inline size_t uvarint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint64_t zigzag(int64_t v)
{
    return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline char *put_uvarint(char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (char)((v & 0x7f) | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

/* The length of `obj` (-1 for None), or -2 (with TypeError set) if it is neither. */
static inline Py_ssize_t nullable_size(PyObject *obj, Py_ssize_t index)
{
    if (obj == Py_None) {
        return -1;
    }
    if (PyBytes_CheckExact(obj)) {
        return PyBytes_GET_SIZE(obj);
    }
    PyErr_Format(PyExc_TypeError, "record %zd: key and value must be bytes or None", index);
    return -2;
}

/* The (key, value) pairs of `pairs` (a list or tuple of 2-tuples, or a dict) as one array
 * of 2n borrowed pointers, in order: key i at [2i], value i at [2i+1].  NULL with an
 * exception set for an element that is not a 2-tuple (TypeError naming its index). */
static PyObject **flatten(PyObject *pairs, int is_dict, Py_ssize_t n)
{
    PyObject **kv = PyMem_Malloc((size_t)(n > 0 ? 2 * n : 1) * sizeof(PyObject *));
    if (kv == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    if (is_dict) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *key, *value;
        while (i < n && PyDict_Next(pairs, &pos, &key, &value)) {
            kv[2 * i] = key;
            kv[2 * i + 1] = value;
            i++;
        }
        return kv;
    }
    PyObject **items = PySequence_Fast_ITEMS(pairs);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd: not a (key, value) tuple", i);
            PyMem_Free(kv);
            return NULL;
        }
        kv[2 * i] = PyTuple_GET_ITEM(pair, 0);
        kv[2 * i + 1] = PyTuple_GET_ITEM(pair, 1);
    }
    return kv;
}

static inline size_t record_body_size(Py_ssize_t i, Py_ssize_t klen, Py_ssize_t vlen)
{
    return 1 + 1 + uvarint_size(zigzag((int64_t)i)) + uvarint_size(zigzag(klen))
           + (size_t)(klen > 0 ? klen : 0) + uvarint_size(zigzag(vlen))
           + (size_t)(vlen > 0 ? vlen : 0) + 1;
}

static PyObject *encode_plain(PyObject *self, PyObject *args)
{
    PyObject *pairs;
    Py_ssize_t prefix;
    int require_keys = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "On|p", &pairs, &prefix, &require_keys)) {
        return NULL;
    }
    if (prefix < 0) {
        PyErr_SetString(PyExc_ValueError, "prefix must be >= 0");
        return NULL;
    }
    int is_dict = PyDict_CheckExact(pairs);
    if (!is_dict && !PyList_CheckExact(pairs) && !PyTuple_CheckExact(pairs)) {
        PyErr_SetString(PyExc_TypeError, "pairs must be a list, a tuple or a dict");
        return NULL;
    }
    /* Neither a list nor a dict can change below: nothing here runs Python code or releases
     * the GIL, so both passes see the same pairs in the same order. */
    Py_ssize_t n = is_dict ? PyDict_GET_SIZE(pairs) : PySequence_Fast_GET_SIZE(pairs);
    PyObject **kv = flatten(pairs, is_dict, n);
    if (kv == NULL) {
        return NULL;
    }
    size_t total = (size_t)prefix;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t klen = nullable_size(kv[2 * i], i);
        if (klen == -2) {
            PyMem_Free(kv);
            return NULL;
        }
        if (klen == -1 && require_keys) {
            PyErr_Format(PyExc_ValueError, "record %zd: no key", i);
            PyMem_Free(kv);
            return NULL;
        }
        Py_ssize_t vlen = nullable_size(kv[2 * i + 1], i);
        if (vlen == -2) {
            PyMem_Free(kv);
            return NULL;
        }
        size_t body = record_body_size(i, klen, vlen);
        total += uvarint_size(zigzag((int64_t)body)) + body;
        if (total > (size_t)PY_SSIZE_T_MAX) {
            PyErr_SetString(PyExc_OverflowError, "records too large");
            PyMem_Free(kv);
            return NULL;
        }
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out == NULL) {
        PyMem_Free(kv);
        return NULL;
    }
    char *start = PyByteArray_AS_STRING(out);
    memset(start, 0, (size_t)prefix);
    char *p = start + prefix;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = kv[2 * i];
        PyObject *value = kv[2 * i + 1];
        Py_ssize_t klen = key == Py_None ? -1 : PyBytes_GET_SIZE(key);
        Py_ssize_t vlen = value == Py_None ? -1 : PyBytes_GET_SIZE(value);
        size_t body = record_body_size(i, klen, vlen);
        p = put_uvarint(p, zigzag((int64_t)body));
        *p++ = 0; /* attributes */
        *p++ = 0; /* timestamp delta: zigzag(0) */
        p = put_uvarint(p, zigzag((int64_t)i));
        p = put_uvarint(p, zigzag(klen));
        if (klen > 0) {
            memcpy(p, PyBytes_AS_STRING(key), (size_t)klen);
            p += klen;
        }
        p = put_uvarint(p, zigzag(vlen));
        if (vlen > 0) {
            memcpy(p, PyBytes_AS_STRING(value), (size_t)vlen);
            p += vlen;
        }
        *p++ = 0; /* header count */
    }
    PyMem_Free(kv);
    if ((size_t)(p - start) != total) { /* cannot happen: both passes size alike */
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "record encoder size mismatch");
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"encode_plain", encode_plain, METH_VARARGS,
     "encode_plain(pairs, prefix, require_keys=False) -> bytearray: `prefix` zero bytes, then "
     "one Kafka v2 record per (key, value) pair (or dict entry) (offset delta = index, timestamp delta 0, no "
     "headers); with require_keys a None key raises ValueError."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_records",
    .m_doc = "The append path's compiled record encoder (see changelog.record.batch).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__records(void)
{
    return PyModule_Create(&module);
}
