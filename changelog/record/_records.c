/* Kafka v2 records in one C loop: the append path's encoder and the restore path's decoder.
 *
 * encode_batch(pairs, require_keys, base_offset, timestamp_ms, partition_leader_epoch,
 *              attributes, producer_id, producer_epoch, base_sequence, crc32c) -> bytearray
 *
 * The append path's whole uncompressed batch.  First the records, one per pair, in order,
 * after room for the 61-byte v2 header: length (zigzag varint), attributes 0, timestamp
 * delta 0, offset delta = the pair's index, key length (-1: null) and key, value length
 * (-1: null) and value, header count 0.  The same bytes as the pure-Python reference,
 * changelog.record.body.encode_body, for records without headers whose timestamps all equal
 * the batch's base timestamp (tests hold them equal).  Then the header (one timestamp as
 * base and max, last offset delta = count - 1, magic 2), its CRC-32C taken by calling
 * `crc32c` on a view of the bytes from the attributes on: the same bytes as
 * changelog.record.header.write_header writes.
 *
 * `pairs` must be a list or tuple of exact 2-tuples of exact bytes or None, or a dict of
 * exact bytes or None to exact bytes or None (one record per entry, in the dict's order);
 * anything else raises TypeError naming the index, and the caller reports it in its own terms.
 * With `require_keys` true a None key raises ValueError naming the index (a compacted
 * log's rule, checked here for free rather than in a second pass over the pairs).
 * Nothing else is checked here: the caller checks the count (at least one, within Kafka's
 * limits) and the field values, as it does for write_header.
 *
 * decode(buf, start, end, count, shape, base_offset=0, base_timestamp=0) -> list
 *
 * The restore path's record decoder, the inverse: `count` records from buf[start:end] (any
 * buffer: bytes, bytearray, memoryview, mmap), every field checked as the pure-Python
 * reference (changelog.record.body.decode_body) checks it, headers included (a header key
 * must be UTF-8).  `shape` 0: (key, value) tuples; 1: (offset, key, value); 2: (offset,
 * timestamp, key, value, headers) with headers a tuple of (str, bytes | None).  A framing
 * error raises ValueError(message, position) with the position of the bad record (or of the
 * bytes left over after `count` records) relative to buf; the caller names the file.
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

/* The records of `pairs` after `prefix` zero bytes, in a new bytearray (see encode_batch). */
static PyObject *encode_records(PyObject *pairs, Py_ssize_t prefix, int require_keys)
{
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

static inline void put_be16(char *p, uint16_t v)
{
    p[0] = (char)(v >> 8);
    p[1] = (char)v;
}

static inline void put_be32(char *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--) {
        p[i] = (char)v;
        v >>= 8;
    }
}

static inline void put_be64(char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (char)v;
        v >>= 8;
    }
}

/* Offsets of the v2 batch header's fields (changelog.record.header.HEADER_FIELDS). */
enum {
    BATCH_HEADER = 61,
    AT_BATCH_LENGTH = 8,
    AT_LEADER_EPOCH = 12,
    AT_MAGIC = 16,
    AT_CRC = 17,
    AT_ATTRIBUTES = 21,
    AT_LAST_OFFSET_DELTA = 23,
    AT_BASE_TIMESTAMP = 27,
    AT_MAX_TIMESTAMP = 35,
    AT_PRODUCER_ID = 43,
    AT_PRODUCER_EPOCH = 51,
    AT_BASE_SEQUENCE = 53,
    AT_RECORDS_COUNT = 57,
};

static PyObject *encode_batch(PyObject *self, PyObject *args)
{
    PyObject *pairs, *crc;
    long long base_offset, timestamp, producer_id;
    int require_keys, attributes, producer_epoch, base_sequence, leader_epoch;
    (void)self;
    if (!PyArg_ParseTuple(args, "OpLLiiLiiO", &pairs, &require_keys, &base_offset, &timestamp,
                          &leader_epoch, &attributes, &producer_id, &producer_epoch,
                          &base_sequence, &crc)) {
        return NULL;
    }
    PyObject *out = encode_records(pairs, BATCH_HEADER, require_keys);
    if (out == NULL) {
        return NULL;
    }
    Py_ssize_t size = PyByteArray_GET_SIZE(out);
    /* encode_records accepted pairs: a dict, a list or a tuple, unchanged since */
    Py_ssize_t count = PyDict_CheckExact(pairs) ? PyDict_GET_SIZE(pairs) : PySequence_Fast_GET_SIZE(pairs);
    if (size - 12 > INT32_MAX || count > INT32_MAX) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_OverflowError, "batch too large");
        return NULL;
    }
    char *b = PyByteArray_AS_STRING(out);
    put_be64(b, (uint64_t)base_offset);
    put_be32(b + AT_BATCH_LENGTH, (uint32_t)(size - 12));
    put_be32(b + AT_LEADER_EPOCH, (uint32_t)leader_epoch);
    b[AT_MAGIC] = 2;
    put_be16(b + AT_ATTRIBUTES, (uint16_t)attributes);
    put_be32(b + AT_LAST_OFFSET_DELTA, (uint32_t)(count - 1));
    put_be64(b + AT_BASE_TIMESTAMP, (uint64_t)timestamp);
    put_be64(b + AT_MAX_TIMESTAMP, (uint64_t)timestamp);
    put_be64(b + AT_PRODUCER_ID, (uint64_t)producer_id);
    put_be16(b + AT_PRODUCER_EPOCH, (uint16_t)producer_epoch);
    put_be32(b + AT_BASE_SEQUENCE, (uint32_t)base_sequence);
    put_be32(b + AT_RECORDS_COUNT, (uint32_t)count);
    /* The CRC-32C of everything from the attributes on, by the caller's function (the
     * crc32c package: hardware CRC, several streams at once). */
    PyObject *view = PyMemoryView_FromMemory(b + AT_ATTRIBUTES, size - AT_ATTRIBUTES, PyBUF_READ);
    if (view == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    PyObject *value = PyObject_CallOneArg(crc, view);
    Py_DECREF(view);
    if (value == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    unsigned long checksum = PyLong_AsUnsignedLong(value);
    Py_DECREF(value);
    if (checksum == (unsigned long)-1 && PyErr_Occurred()) {
        Py_DECREF(out);
        return NULL;
    }
    put_be32(b + AT_CRC, (uint32_t)checksum);
    return out;
}

/* ----------------------------------------------------------------------------- decoding */

typedef struct {
    const unsigned char *buf;
    Py_ssize_t pos;
    Py_ssize_t end;
} Reader;

/* One zig-zag varint of at most 10 bytes; -1 (and *err set) if it runs past `limit`. */
static inline int read_varlong(Reader *r, Py_ssize_t limit, int64_t *out, const char **err)
{
    uint64_t result = 0;
    int shift = 0;
    for (int i = 0; i < 10; i++) {
        if (r->pos >= limit) {
            *err = "varint runs past the end of the batch";
            return -1;
        }
        unsigned char byte = r->buf[r->pos++];
        result |= (uint64_t)(byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(result >> 1) ^ -(int64_t)(result & 1);
            return 0;
        }
        shift += 7;
    }
    *err = "varint longer than 10 bytes";
    return -1;
}

/* A nullable field (length varint, then bytes): a new reference, Py_None, or NULL with
 * *err set (or a Python error set, *err NULL). */
static PyObject *read_nullable(Reader *r, Py_ssize_t limit, const char **err)
{
    int64_t length;
    if (read_varlong(r, limit, &length, err) < 0) {
        return NULL;
    }
    if (length < 0) {
        if (length != -1) {
            *err = "negative length";
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (length > limit - r->pos) {
        *err = "field overruns the batch";
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize((const char *)r->buf + r->pos, (Py_ssize_t)length);
    r->pos += (Py_ssize_t)length;
    return out;
}

static PyObject *read_headers(Reader *r, Py_ssize_t limit, int64_t count, const char **err)
{
    if (count > limit - r->pos) { /* every header takes at least one byte */
        *err = "header count overruns the batch";
        return NULL;
    }
    PyObject *headers = PyTuple_New((Py_ssize_t)count);
    if (headers == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < (Py_ssize_t)count; i++) {
        int64_t klen;
        if (read_varlong(r, limit, &klen, err) < 0) {
            goto fail;
        }
        if (klen < 0) {
            *err = "header key length is negative (a header key cannot be null)";
            goto fail;
        }
        if (klen > limit - r->pos) {
            *err = "header key overruns the batch";
            goto fail;
        }
        PyObject *key =
            PyUnicode_DecodeUTF8((const char *)r->buf + r->pos, (Py_ssize_t)klen, "strict");
        if (key == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                *err = "header key is not UTF-8";
            }
            goto fail;
        }
        r->pos += (Py_ssize_t)klen;
        PyObject *value = read_nullable(r, limit, err);
        if (value == NULL) {
            Py_DECREF(key);
            goto fail;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL) {
            goto fail;
        }
        PyTuple_SET_ITEM(headers, i, pair);
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

static PyObject *empty_headers;

/* One record at r->pos as the tuple of `shape`; NULL with *err set (a framing error) or a
 * Python error set. */
static PyObject *read_record(Reader *r, int shape, int64_t base_offset, int64_t base_timestamp,
                             const char **err)
{
    int64_t length, timestamp_delta, offset_delta, header_count;
    if (read_varlong(r, r->end, &length, err) < 0) {
        return NULL;
    }
    Py_ssize_t body_start = r->pos;
    if (length < 0 || length > r->end - body_start) {
        *err = "record length overruns the batch";
        return NULL;
    }
    Py_ssize_t limit = body_start + (Py_ssize_t)length;
    if (r->pos >= limit) {
        *err = "record length says 0 bytes";
        return NULL;
    }
    r->pos++; /* attributes */
    if (read_varlong(r, limit, &timestamp_delta, err) < 0
        || read_varlong(r, limit, &offset_delta, err) < 0) {
        return NULL;
    }
    PyObject *key = read_nullable(r, limit, err);
    if (key == NULL) {
        return NULL;
    }
    PyObject *value = read_nullable(r, limit, err);
    if (value == NULL) {
        Py_DECREF(key);
        return NULL;
    }
    PyObject *headers = NULL;
    if (read_varlong(r, limit, &header_count, err) < 0) {
        goto fail;
    }
    if (header_count < 0) {
        *err = "negative header count";
        goto fail;
    }
    if (header_count == 0) {
        headers = Py_NewRef(empty_headers);
    }
    else {
        headers = read_headers(r, limit, header_count, err);
        if (headers == NULL) {
            goto fail;
        }
    }
    if (r->pos != limit) {
        *err = "record length does not match its fields";
        goto fail;
    }
    PyObject *out;
    if (shape == 0) {
        out = PyTuple_Pack(2, key, value);
    }
    else {
        PyObject *offset = PyLong_FromLongLong(base_offset + offset_delta);
        if (offset == NULL) {
            goto fail;
        }
        if (shape == 1) {
            out = PyTuple_Pack(3, offset, key, value);
        }
        else {
            PyObject *timestamp = PyLong_FromLongLong(base_timestamp + timestamp_delta);
            out = timestamp == NULL ? NULL
                                    : PyTuple_Pack(5, offset, timestamp, key, value, headers);
            Py_XDECREF(timestamp);
        }
        Py_DECREF(offset);
    }
    Py_DECREF(key);
    Py_DECREF(value);
    Py_DECREF(headers);
    return out;
fail:
    Py_DECREF(key);
    Py_DECREF(value);
    Py_XDECREF(headers);
    return NULL;
}

static PyObject *framing_error(const char *message, Py_ssize_t position)
{
    PyObject *args = Py_BuildValue("(sn)", message, position);
    if (args != NULL) {
        PyErr_SetObject(PyExc_ValueError, args);
        Py_DECREF(args);
    }
    return NULL;
}

static PyObject *decode(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t start, end, count;
    int shape;
    long long base_offset = 0, base_timestamp = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnni|LL", &view, &start, &end, &count, &shape, &base_offset,
                          &base_timestamp)) {
        return NULL;
    }
    PyObject *out = NULL;
    if (start < 0 || end < start || end > view.len || count < 0 || shape < 0 || shape > 2) {
        PyErr_SetString(PyExc_SystemError, "decode: bad arguments");
        goto done;
    }
    if (count > end - start) { /* every record takes at least two bytes */
        framing_error("record count overruns the batch", start);
        goto done;
    }
    out = PyList_New(count);
    if (out == NULL) {
        goto done;
    }
    Reader r = {(const unsigned char *)view.buf, start, end};
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t record_start = r.pos;
        const char *err = NULL;
        PyObject *record = read_record(&r, shape, base_offset, base_timestamp, &err);
        if (record == NULL) {
            Py_CLEAR(out);
            if (err != NULL) {
                framing_error(err, record_start);
            }
            goto done;
        }
        PyList_SET_ITEM(out, i, record);
    }
    if (r.pos != end) {
        Py_CLEAR(out);
        framing_error("bytes left over after the batch's records", r.pos);
    }
done:
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"encode_batch", encode_batch, METH_VARARGS,
     "encode_batch(pairs, require_keys, base_offset, timestamp_ms, partition_leader_epoch, "
     "attributes, producer_id, producer_epoch, base_sequence, crc32c) -> bytearray: a whole "
     "uncompressed v2 batch, one record per (key, value) pair (one timestamp), header and CRC "
     "(crc32c(buffer) -> int) included."},
    {"decode", decode, METH_VARARGS,
     "decode(buf, start, end, count, shape, base_offset=0, base_timestamp=0) -> list: `count` "
     "Kafka v2 records of buf[start:end] as (key, value) (shape 0), (offset, key, value) (1) or "
     "(offset, timestamp, key, value, headers) (2); ValueError(message, position) if malformed."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_records",
    .m_doc = "The compiled record encoder (append) and decoder (restore); see changelog.record.batch.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__records(void)
{
    empty_headers = PyTuple_New(0);
    if (empty_headers == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
