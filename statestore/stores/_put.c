/* The store layer's hot paths in C: the typed store's put (Putter) and get (Getter, after
 * it), the write buffer's forget and the engine's WriteBatch fill (at the end of this file).
 *
 * The typed store's put: serialize, check, buffer, with no Python frame of its own.
 *
 * Putter(cell, ser_key, ser_value, max_record_bytes, inner_put, slow)
 *
 * Calling it with (key, value) does what KeyValueStore.put does on its fast path:
 *
 *   1. the store is open: cell[0] is True (the store keeps cell[0] equal to
 *      "state is OPEN" in its one state-transition method);
 *   2. the key's bytes: the key itself when ser_key is None (BytesSerde) and it
 *      is exactly bytes, else ser_key(key), which must return exactly bytes;
 *   3. the value's bytes: ser_value(value), exactly bytes (value None: a delete);
 *   4. len(key) + len(value) <= max_record_bytes;
 *   5. inner_put(key_bytes, value_bytes), or, when inner_put is a dict (the write buffer's
 *      pending dict, whose bound __setitem__ is the buffer's put), PyDict_SetItem on it:
 *      a method-wrapper has no vectorcall, so calling __setitem__ built an argument tuple
 *      per put.
 *
 * Whenever one of 1-4 does not hold (a closed store, a key of another type, None,
 * a serializer that raised an Exception, a record too large, keyword arguments),
 * it calls slow(key, value), the Python put, which raises the store's typed error
 * or does the rare case itself.  The serializers are pure, so calling them again
 * there is harmless.  A BaseException that is not an Exception (KeyboardInterrupt)
 * propagates as it is.  Nothing here releases the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD
    PyObject *cell;
    PyObject *ser_key;
    PyObject *ser_value;
    PyObject *inner_put;
    PyObject *slow;
    Py_ssize_t max_record_bytes;
    vectorcallfunc vectorcall;
} Putter;

static int Putter_traverse(Putter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cell);
    Py_VISIT(self->ser_key);
    Py_VISIT(self->ser_value);
    Py_VISIT(self->inner_put);
    Py_VISIT(self->slow);
    return 0;
}

static int Putter_clear(Putter *self)
{
    Py_CLEAR(self->cell);
    Py_CLEAR(self->ser_key);
    Py_CLEAR(self->ser_value);
    Py_CLEAR(self->inner_put);
    Py_CLEAR(self->slow);
    return 0;
}

static void Putter_dealloc(Putter *self)
{
    PyObject_GC_UnTrack(self);
    Putter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Call `fn(arg)`; NULL with no error set means "take the slow path". */
static PyObject *serialize(PyObject *fn, PyObject *arg)
{
    PyObject *out = PyObject_CallOneArg(fn, arg);
    if (out == NULL) {
        if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear();
        }
        return NULL;
    }
    if (!PyBytes_CheckExact(out)) {
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

static PyObject *Putter_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames)
{
    Putter *self = (Putter *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *key_bytes = NULL;
    PyObject *value_bytes = NULL;
    if (kwnames != NULL || nargs != 2 || args[1] == Py_None
        || PyList_GET_ITEM(self->cell, 0) != Py_True) {
        goto slow;
    }
    if (self->ser_key == Py_None) {
        if (!PyBytes_CheckExact(args[0])) {
            goto slow;
        }
        key_bytes = Py_NewRef(args[0]);
    } else {
        if (args[0] == Py_None) {
            goto slow;
        }
        key_bytes = serialize(self->ser_key, args[0]);
        if (key_bytes == NULL) {
            goto slow_or_error;
        }
    }
    value_bytes = serialize(self->ser_value, args[1]);
    if (value_bytes == NULL) {
        goto slow_or_error;
    }
    if (PyBytes_GET_SIZE(key_bytes) + PyBytes_GET_SIZE(value_bytes) > self->max_record_bytes) {
        goto slow;
    }
    PyObject *result;
    if (PyDict_CheckExact(self->inner_put)) { /* the write buffer's dict itself */
        result = PyDict_SetItem(self->inner_put, key_bytes, value_bytes) < 0 ? NULL
                                                                              : Py_NewRef(Py_None);
    } else {
        PyObject *pair[2] = {key_bytes, value_bytes};
        result = PyObject_Vectorcall(self->inner_put, pair, 2, NULL);
    }
    Py_DECREF(key_bytes);
    Py_DECREF(value_bytes);
    return result;
slow_or_error:
    if (PyErr_Occurred()) { /* a BaseException that is not an Exception */
        Py_XDECREF(key_bytes);
        Py_XDECREF(value_bytes);
        return NULL;
    }
slow:
    Py_XDECREF(key_bytes);
    Py_XDECREF(value_bytes);
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *Putter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *cell, *ser_key, *ser_value, *inner_put, *slow;
    Py_ssize_t max_record_bytes;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Putter takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OOnOO", &PyList_Type, &cell, &ser_key, &ser_value,
                          &max_record_bytes, &inner_put, &slow)) {
        return NULL;
    }
    if (PyList_GET_SIZE(cell) != 1) {
        PyErr_SetString(PyExc_ValueError, "cell must be a list of one element");
        return NULL;
    }
    if ((ser_key != Py_None && !PyCallable_Check(ser_key)) || !PyCallable_Check(ser_value)
        || !(PyCallable_Check(inner_put) || PyDict_CheckExact(inner_put))
        || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError,
                        "serializers and slow must be callable, inner_put callable or a dict");
        return NULL;
    }
    Putter *self = (Putter *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->cell = Py_NewRef(cell);
    self->ser_key = Py_NewRef(ser_key);
    self->ser_value = Py_NewRef(ser_value);
    self->inner_put = Py_NewRef(inner_put);
    self->slow = Py_NewRef(slow);
    self->max_record_bytes = max_record_bytes;
    self->vectorcall = Putter_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject PutterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "statestore.stores._put.Putter",
    .tp_doc = "A typed store's put in C (see statestore/stores/_put.c).",
    .tp_basicsize = sizeof(Putter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Putter_new,
    .tp_dealloc = (destructor)Putter_dealloc,
    .tp_traverse = (traverseproc)Putter_traverse,
    .tp_clear = (inquiry)Putter_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Putter, vectorcall),
};

/* The typed store's get, its fast path in C (issue 18: the two Python frames of a get,
 * the typed store's and the write buffer's, were most of what a get cost above raw's).
 *
 * Getter(cell, ser_key, pending, lookup_cell, try_cell, slow)
 *
 * Calling it with (key) or (key, default) does what KeyValueStore.get does for a store of
 * one partition whose write buffer is directly below:
 *
 *   1. the store is open: cell[0] is True (the put's cell);
 *   2. the key's bytes: the key itself when ser_key is None (bytes keys) and it is exactly
 *      bytes, else ser_key(key), which must return exactly bytes;
 *   3. the buffer's pending write of the key (pending[key]; None: a tombstone), else
 *      lookup_cell[0](key), RocksDB's own get (the buffer empties the cell when it closes,
 *      so no reference to RocksDB outlives it);
 *   4. None: default; else try_cell[0](data), the value serde's first-try decoder (the
 *      store replaces it in the cell when it replaces its own).
 *
 * Whenever one of these does not hold or raises an Exception (a closed store, a key of
 * another type, a serializer or a lookup that raised, a value the first try refused), it
 * calls slow(key, default), the Python get, which does it again and raises the store's
 * typed error or decodes the value its own way.  Reads are pure, so the repeat is harmless.
 * A BaseException that is not an Exception propagates as it is.
 */
typedef struct {
    PyObject_HEAD
    PyObject *cell;
    PyObject *ser_key;
    PyObject *pending;
    PyObject *lookup_cell;
    PyObject *try_cell;
    PyObject *slow;
    vectorcallfunc vectorcall;
} Getter;

static int Getter_traverse(Getter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cell);
    Py_VISIT(self->ser_key);
    Py_VISIT(self->pending);
    Py_VISIT(self->lookup_cell);
    Py_VISIT(self->try_cell);
    Py_VISIT(self->slow);
    return 0;
}

static int Getter_clear(Getter *self)
{
    Py_CLEAR(self->cell);
    Py_CLEAR(self->ser_key);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->lookup_cell);
    Py_CLEAR(self->try_cell);
    Py_CLEAR(self->slow);
    return 0;
}

static void Getter_dealloc(Getter *self)
{
    PyObject_GC_UnTrack(self);
    Getter_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An Exception clears to "take the slow path" (returns 1); a BaseException stays set (0). */
static int slow_after_error(void)
{
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

static PyObject *Getter_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames)
{
    Getter *self = (Getter *)obj;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *key_bytes = NULL;
    PyObject *data = NULL;
    if (kwnames != NULL || nargs < 1 || nargs > 2 || PyList_GET_ITEM(self->cell, 0) != Py_True) {
        goto slow;
    }
    PyObject *dflt = nargs == 2 ? args[1] : Py_None;
    if (self->ser_key == Py_None) {
        if (!PyBytes_CheckExact(args[0])) {
            goto slow;
        }
        key_bytes = Py_NewRef(args[0]);
    } else {
        if (args[0] == Py_None) {
            goto slow;
        }
        key_bytes = serialize(self->ser_key, args[0]);
        if (key_bytes == NULL) {
            goto slow_or_error;
        }
    }
    data = PyDict_GetItemWithError(self->pending, key_bytes); /* borrowed */
    if (data != NULL) {
        Py_INCREF(data);
    } else {
        if (PyErr_Occurred()) {
            goto slow_or_error;
        }
        PyObject *lookup = PyList_GET_ITEM(self->lookup_cell, 0);
        if (lookup == Py_None) {
            goto slow;
        }
        Py_INCREF(lookup);
        data = PyObject_CallOneArg(lookup, key_bytes);
        Py_DECREF(lookup);
        if (data == NULL) {
            goto slow_or_error;
        }
    }
    Py_DECREF(key_bytes);
    key_bytes = NULL;
    if (data == Py_None) {
        Py_DECREF(data);
        return Py_NewRef(dflt);
    }
    PyObject *decode = Py_NewRef(PyList_GET_ITEM(self->try_cell, 0));
    PyObject *value = PyObject_CallOneArg(decode, data);
    Py_DECREF(decode);
    Py_DECREF(data);
    data = NULL;
    if (value != NULL) {
        return value;
    }
slow_or_error: /* an Exception (or none: serialize() already cleared it) goes slow */
    if (PyErr_Occurred() && !slow_after_error()) {
        Py_XDECREF(key_bytes);
        Py_XDECREF(data);
        return NULL;
    }
slow:
    Py_XDECREF(key_bytes);
    Py_XDECREF(data);
    return PyObject_Vectorcall(self->slow, args, nargsf, kwnames);
}

static PyObject *Getter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *cell, *ser_key, *pending, *lookup_cell, *try_cell, *slow;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Getter takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OO!O!O!O", &PyList_Type, &cell, &ser_key, &PyDict_Type,
                          &pending, &PyList_Type, &lookup_cell, &PyList_Type, &try_cell, &slow)) {
        return NULL;
    }
    if (PyList_GET_SIZE(cell) != 1 || PyList_GET_SIZE(lookup_cell) != 1
        || PyList_GET_SIZE(try_cell) != 1) {
        PyErr_SetString(PyExc_ValueError, "cells must be lists of one element");
        return NULL;
    }
    if ((ser_key != Py_None && !PyCallable_Check(ser_key)) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "ser_key and slow must be callable");
        return NULL;
    }
    Getter *self = (Getter *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->cell = Py_NewRef(cell);
    self->ser_key = Py_NewRef(ser_key);
    self->pending = Py_NewRef(pending);
    self->lookup_cell = Py_NewRef(lookup_cell);
    self->try_cell = Py_NewRef(try_cell);
    self->slow = Py_NewRef(slow);
    self->vectorcall = Getter_vectorcall;
    return (PyObject *)self;
}

static PyTypeObject GetterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "statestore.stores._put.Getter",
    .tp_doc = "A typed store's get in C (see statestore/stores/_put.c).",
    .tp_basicsize = sizeof(Getter),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Getter_new,
    .tp_dealloc = (destructor)Getter_dealloc,
    .tp_traverse = (traverseproc)Getter_traverse,
    .tp_clear = (inquiry)Getter_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Getter, vectorcall),
};

/* forget(pending, records): drop from the dict `pending` each (key, value) of `records` (a
 * dict snapshot from take(), or a list of (key, value) tuples) whose key still maps to that
 * very value object; a key rewritten meanwhile (another object) keeps its newer value.  The
 * write buffer's forget, in one step under the GIL: no other thread can write between the
 * look and the delete. */
static int forget_one(PyObject *pending, PyObject *key, PyObject *value)
{
    PyObject *current = PyDict_GetItemWithError(pending, key); /* borrowed */
    if (current == NULL) {
        return PyErr_Occurred() ? -1 : 0;
    }
    return current == value ? PyDict_DelItem(pending, key) : 0;
}

static PyObject *forget(PyObject *self, PyObject *args)
{
    PyObject *pending, *records;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &pending, &records)) {
        return NULL;
    }
    if (PyDict_CheckExact(records)) {
        if (records == pending) {
            PyErr_SetString(PyExc_ValueError, "records must be a snapshot, not the pending dict");
            return NULL;
        }
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        /* records is nobody else's: take() made it, and nothing here runs Python code */
        while (PyDict_Next(records, &pos, &key, &value)) {
            if (forget_one(pending, key, value) < 0) {
                return NULL;
            }
        }
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be a dict or a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(records, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd: not a (key, value) tuple", i);
            return NULL;
        }
        if (forget_one(pending, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0) {
            return NULL;
        }
    }
    Py_RETURN_NONE;
}

/* The order fill() hands the records to the WriteBatch: by key bytes (memcmp, then length),
 * ties by position, so a key repeated in one list keeps its last write last (stable).
 * RocksDB's memtable skip list inserts keys that come in order far faster than random ones:
 * each insert starts its search at the last one's place (its "splice") instead of at the
 * top of the list, and touches nodes the last insert left in the cache. */
typedef struct {
    const char *bytes;
    Py_ssize_t len;
    Py_ssize_t index;
    PyObject *key;   /* borrowed from the records */
    PyObject *value; /* borrowed; Py_None: a delete */
} KeyRef;

static int keyref_compare(const void *a, const void *b)
{
    const KeyRef *x = a, *y = b;
    Py_ssize_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->bytes, y->bytes, (size_t)n);
    if (c != 0) {
        return c;
    }
    if (x->len != y->len) {
        return x->len < y->len ? -1 : 1;
    }
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* The records of a list of (key, value) tuples or of a dict, in their order; -1 on error. */
static Py_ssize_t collect(PyObject *records, KeyRef *refs, Py_ssize_t n)
{
    if (PyDict_CheckExact(records)) {
        Py_ssize_t pos = 0, i = 0;
        PyObject *key, *value;
        while (i < n && PyDict_Next(records, &pos, &key, &value)) {
            refs[i].key = key;
            refs[i].value = value;
            i++;
        }
        return i;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(records, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd: not a (key, value) tuple", i);
            return -1;
        }
        refs[i].key = PyTuple_GET_ITEM(pair, 0);
        refs[i].value = PyTuple_GET_ITEM(pair, 1);
    }
    return n;
}

/* fill(batch, records): batch.put(key, value) for each record of `records` (a list of
 * (key, value) tuples, or a dict key -> value), or batch.delete(key) when value is None, in
 * key order (see KeyRef); records with a key that is not exactly bytes go in their own order
 * (rocksdict raises on that key).  The engine's WriteBatch fill without a Python loop.  The
 * first error of a put or delete is raised at once.  Nothing here runs Python code before
 * the puts, so the records cannot change under it; the puts themselves are rocksdict's. */
static PyObject *fill(PyObject *self, PyObject *args)
{
    PyObject *batch, *records;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &batch, &records)) {
        return NULL;
    }
    if (!PyList_CheckExact(records) && !PyDict_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "records must be a list or a dict");
        return NULL;
    }
    Py_ssize_t n = PyList_CheckExact(records) ? PyList_GET_SIZE(records) : PyDict_GET_SIZE(records);
    KeyRef *refs = PyMem_Malloc((size_t)(n > 0 ? n : 1) * sizeof(KeyRef));
    if (refs == NULL) {
        return PyErr_NoMemory();
    }
    n = collect(records, refs, n);
    if (n < 0) {
        PyMem_Free(refs);
        return NULL;
    }
    int sortable = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        refs[i].index = i;
        if (!PyBytes_CheckExact(refs[i].key)) {
            sortable = 0;
            break;
        }
        refs[i].bytes = PyBytes_AS_STRING(refs[i].key);
        refs[i].len = PyBytes_GET_SIZE(refs[i].key);
    }
    if (sortable && n > 1) {
        qsort(refs, (size_t)n, sizeof(KeyRef), keyref_compare);
    }
    /* Hold the records while rocksdict runs: its put may release the GIL or run Python. */
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(refs[i].key);
        Py_INCREF(refs[i].value);
    }
    PyObject *put = PyObject_GetAttrString(batch, "put");
    PyObject *delete = put == NULL ? NULL : PyObject_GetAttrString(batch, "delete");
    PyObject *result = delete == NULL ? NULL : Py_None;
    for (Py_ssize_t i = 0; result != NULL && i < n; i++) {
        PyObject *out;
        if (refs[i].value == Py_None) {
            out = PyObject_CallOneArg(delete, refs[i].key);
        } else {
            PyObject *kv[2] = {refs[i].key, refs[i].value};
            out = PyObject_Vectorcall(put, kv, 2, NULL);
        }
        if (out == NULL) {
            result = NULL;
        } else {
            Py_DECREF(out);
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_DECREF(refs[i].key);
        Py_DECREF(refs[i].value);
    }
    PyMem_Free(refs);
    Py_XDECREF(put);
    Py_XDECREF(delete);
    return result == NULL ? NULL : Py_NewRef(Py_None);
}

static PyMethodDef methods[] = {
    {"forget", forget, METH_VARARGS,
     "forget(pending, records): drop each committed (key, value) (a dict snapshot or a list) "
     "still buffered as is."},
    {"fill", fill, METH_VARARGS,
     "fill(batch, records): batch.put(key, value), or batch.delete(key) for None, per record "
     "(a list of pairs or a dict), in key order."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_put",
    .m_doc = "The store layer's compiled hot paths: the typed put and get, forget, the WriteBatch fill.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__put(void)
{
    if (PyType_Ready(&PutterType) < 0 || PyType_Ready(&GetterType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Putter", (PyObject *)&PutterType) < 0
        || PyModule_AddObjectRef(m, "Getter", (PyObject *)&GetterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
