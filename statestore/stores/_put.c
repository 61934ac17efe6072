/* The store layer's hot paths in C: the write buffer's put and get (Pending), the typed
 * store's put (Putter) and get (Getter) over it, the write buffer's forget and the engine's
 * WriteBatch fill (at the end of this file).
 *
 * Who owns what: a Pending belongs to the write buffer that made it (WriteBuffer.fast_path
 * offers it; the builder grants it to the typed store).  A Putter or Getter belongs to the
 * typed store; it reaches the buffer's pending writes only through the Pending it was
 * granted, never through anything else of the buffer.
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
 *   5. inner_put(key_bytes, value_bytes), the layer below's put; when inner_put is a
 *      Pending (the buffer's compiled put, granted by the builder), its put is done here
 *      without the call (the same PyDict_SetItem Pending's own call does).
 *
 * Whenever one of 1-4 does not hold (a closed store, a key of another type, None,
 * a serializer that raised an Exception, a record too large, keyword arguments, a cell
 * that is not a one-element list), it calls slow(key, value), the Python put, which
 * raises the store's typed error or does the rare case itself.  The serializers are
 * pure, so calling them again there is harmless.  A BaseException that is not an
 * Exception (KeyboardInterrupt) propagates as it is.  Nothing here releases the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* cell[0] of a one-element list (borrowed), or NULL, no error set, when the list is not of
 * one element: the callers then take the slow path instead of reading out of bounds. */
static inline PyObject *cell_item(PyObject *cell)
{
    return PyList_GET_SIZE(cell) == 1 ? PyList_GET_ITEM(cell, 0) : NULL;
}

/* The write buffer's compiled put and get: Pending(pending, lookup).
 *
 *   pending  the buffer's dict of pending writes (serialized key -> value, None: a tombstone);
 *   lookup   RocksDB's own get, or None once the buffer closed (close() drops it, so no
 *            reference to RocksDB outlives the buffer).
 *
 * Calling it with (key, value) is pending[key] = value: the buffer's put.  The Getter below
 * reads pending first, then lookup: the buffer's get.  Made by the write buffer only.
 */
typedef struct {
    PyObject_HEAD
    PyObject *pending;
    PyObject *lookup;
    vectorcallfunc vectorcall;
} Pending;

static int Pending_traverse(Pending *self, visitproc visit, void *arg)
{
    Py_VISIT(self->pending);
    Py_VISIT(self->lookup);
    return 0;
}

static int Pending_clear(Pending *self)
{
    Py_CLEAR(self->pending);
    Py_CLEAR(self->lookup);
    return 0;
}

static void Pending_dealloc(Pending *self)
{
    PyObject_GC_UnTrack(self);
    Pending_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Pending_vectorcall(PyObject *obj, PyObject *const *args, size_t nargsf,
                                    PyObject *kwnames)
{
    Pending *self = (Pending *)obj;
    if (kwnames != NULL || PyVectorcall_NARGS(nargsf) != 2) {
        PyErr_SetString(PyExc_TypeError, "the buffer's put takes (key, value)");
        return NULL;
    }
    if (PyDict_SetItem(self->pending, args[0], args[1]) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Pending_close(Pending *self, PyObject *Py_UNUSED(ignored))
{
    Py_SETREF(self->lookup, Py_NewRef(Py_None));
    Py_RETURN_NONE;
}

static PyObject *Pending_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *pending, *lookup;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Pending takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &pending, &lookup)) {
        return NULL;
    }
    if (!PyCallable_Check(lookup)) {
        PyErr_SetString(PyExc_TypeError, "lookup must be callable");
        return NULL;
    }
    Pending *self = (Pending *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->pending = Py_NewRef(pending);
    self->lookup = Py_NewRef(lookup);
    self->vectorcall = Pending_vectorcall;
    return (PyObject *)self;
}

static PyMethodDef Pending_methods[] = {
    {"close", (PyCFunction)Pending_close, METH_NOARGS,
     "Drop the reference to RocksDB's get (the buffer closes)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PendingType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "statestore.stores._put.Pending",
    .tp_doc = "A write buffer's compiled put and get (see statestore/stores/_put.c).",
    .tp_basicsize = sizeof(Pending),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_new = Pending_new,
    .tp_dealloc = (destructor)Pending_dealloc,
    .tp_traverse = (traverseproc)Pending_traverse,
    .tp_clear = (inquiry)Pending_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Pending, vectorcall),
    .tp_methods = Pending_methods,
};

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
        || cell_item(self->cell) != Py_True) {
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
    if (Py_IS_TYPE(self->inner_put, &PendingType)) { /* the buffer's compiled put, inlined */
        result = PyDict_SetItem(((Pending *)self->inner_put)->pending, key_bytes, value_bytes) < 0
                     ? NULL
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
        || !PyCallable_Check(inner_put) || !PyCallable_Check(slow)) {
        PyErr_SetString(PyExc_TypeError, "serializers, inner_put and slow must be callable");
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

/* The typed store's get, its fast path in C (the typed store's and the write buffer's get
 * without a Python frame of either).
 *
 * Getter(cell, ser_key, source, try_cell, slow)
 *
 * Calling it with (key) or (key, default) does what KeyValueStore.get does for a store of
 * one partition whose write buffer granted it its compiled get (source, a Pending):
 *
 *   1. the store is open: cell[0] is True (the put's cell);
 *   2. the key's bytes: the key itself when ser_key is None (bytes keys) and it is exactly
 *      bytes, else ser_key(key), which must return exactly bytes;
 *   3. the buffer's get: its pending write of the key (source's pending[key]; None: a
 *      tombstone), else source's lookup(key), RocksDB's own get (None once the buffer
 *      closed: then the slow path);
 *   4. None: default; else try_cell[0](data), the value serde's first-try decoder (the
 *      store replaces it in the cell when it replaces its own).
 *
 * Whenever one of these does not hold or raises an Exception (a closed store, a key of
 * another type, a serializer or a lookup that raised, a value the first try refused, a
 * cell that is not a one-element list), it calls slow(key, default), the Python get,
 * which does it again and raises the store's typed error or decodes the value its own way.  Reads are pure, so the repeat is harmless.
 * A BaseException that is not an Exception propagates as it is.
 */
typedef struct {
    PyObject_HEAD
    PyObject *cell;
    PyObject *ser_key;
    PyObject *source;
    PyObject *try_cell;
    PyObject *slow;
    vectorcallfunc vectorcall;
} Getter;

static int Getter_traverse(Getter *self, visitproc visit, void *arg)
{
    Py_VISIT(self->cell);
    Py_VISIT(self->ser_key);
    Py_VISIT(self->source);
    Py_VISIT(self->try_cell);
    Py_VISIT(self->slow);
    return 0;
}

static int Getter_clear(Getter *self)
{
    Py_CLEAR(self->cell);
    Py_CLEAR(self->ser_key);
    Py_CLEAR(self->source);
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
    if (kwnames != NULL || nargs < 1 || nargs > 2 || cell_item(self->cell) != Py_True) {
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
    Pending *source = (Pending *)self->source;
    data = PyDict_GetItemWithError(source->pending, key_bytes); /* borrowed */
    if (data != NULL) {
        Py_INCREF(data);
    } else {
        if (PyErr_Occurred()) {
            goto slow_or_error;
        }
        PyObject *lookup = source->lookup;
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
    PyObject *decode = cell_item(self->try_cell);
    if (decode == NULL) {
        Py_DECREF(data);
        data = NULL;
        goto slow;
    }
    Py_INCREF(decode);
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
    PyObject *cell, *ser_key, *source, *try_cell, *slow;
    if (kwds != NULL && PyDict_GET_SIZE(kwds) != 0) {
        PyErr_SetString(PyExc_TypeError, "Getter takes positional arguments only");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "O!OO!O!O", &PyList_Type, &cell, &ser_key, &PendingType, &source,
                          &PyList_Type, &try_cell, &slow)) {
        return NULL;
    }
    if (PyList_GET_SIZE(cell) != 1 || PyList_GET_SIZE(try_cell) != 1) {
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
    self->source = Py_NewRef(source);
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

/* IntSerde in C: (value + 2**63) as 8 big-endian bytes, and back; the same checks and
 * messages as statestore/serdes.py's Python methods (tests hold them equal). */
static PyObject *int64_ordered(PyObject *Py_UNUSED(module), PyObject *obj)
{
    if (!PyLong_CheckExact(obj) && (PyBool_Check(obj) || !PyLong_Check(obj))) {
        PyObject *name = PyType_GetName(Py_TYPE(obj)); /* type(obj).__name__ */
        if (name == NULL) {
            return NULL;
        }
        PyErr_Format(PyExc_TypeError, "expected int, got %U", name);
        Py_DECREF(name);
        return NULL;
    }
    int overflow = 0;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow != 0) {
        return PyErr_Format(PyExc_ValueError, "%S does not fit in a signed 64-bit integer", obj);
    }
    if (value == -1 && PyErr_Occurred()) {
        return NULL;
    }
    unsigned long long bits = (unsigned long long)value ^ 0x8000000000000000ULL;
    unsigned char out[8];
    for (int i = 7; i >= 0; i--) {
        out[i] = (unsigned char)(bits & 0xff);
        bits >>= 8;
    }
    return PyBytes_FromStringAndSize((const char *)out, 8);
}

static PyObject *int64_from_ordered(PyObject *Py_UNUSED(module), PyObject *data)
{
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (view.len != 8) {
        Py_ssize_t len = view.len;
        PyBuffer_Release(&view);
        return PyErr_Format(PyExc_ValueError, "expected 8 bytes, got %zd", len);
    }
    const unsigned char *in = (const unsigned char *)view.buf;
    unsigned long long bits = 0;
    for (int i = 0; i < 8; i++) {
        bits = (bits << 8) | in[i];
    }
    PyBuffer_Release(&view);
    return PyLong_FromLongLong((long long)(bits ^ 0x8000000000000000ULL));
}

static PyMethodDef methods[] = {
    {"int64_ordered", int64_ordered, METH_O,
     "int64_ordered(value): IntSerde's 8 ordered bytes of a signed 64-bit int."},
    {"int64_from_ordered", int64_from_ordered, METH_O,
     "int64_from_ordered(data): the int of IntSerde's 8 ordered bytes."},
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
    .m_doc = "The store layer's compiled hot paths: the buffer's and the typed put and get, forget, "
             "the WriteBatch fill, IntSerde's encoding.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__put(void)
{
    if (PyType_Ready(&PendingType) < 0 || PyType_Ready(&PutterType) < 0
        || PyType_Ready(&GetterType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Pending", (PyObject *)&PendingType) < 0
        || PyModule_AddObjectRef(m, "Putter", (PyObject *)&PutterType) < 0
        || PyModule_AddObjectRef(m, "Getter", (PyObject *)&GetterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
