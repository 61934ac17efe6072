/* The store layer's write path in C: the typed store's put (Putter), the write buffer's
 * forget and the engine's WriteBatch fill (at the end of this file).
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
 *   5. inner_put(key_bytes, value_bytes).
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
    PyObject *pair[2] = {key_bytes, value_bytes};
    PyObject *result = PyObject_Vectorcall(self->inner_put, pair, 2, NULL);
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

/* forget(pending, records): drop from the dict `pending` each (key, value) of the list
 * `records` whose key still maps to that very value object; a key rewritten meanwhile
 * (another object) keeps its newer value.  The write buffer's forget, in one step under
 * the GIL: no other thread can write between the look and the delete. */
static PyObject *forget(PyObject *self, PyObject *args)
{
    PyObject *pending, *records;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &pending, &PyList_Type, &records)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(records, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd: not a (key, value) tuple", i);
            return NULL;
        }
        PyObject *key = PyTuple_GET_ITEM(pair, 0);
        PyObject *current = PyDict_GetItemWithError(pending, key); /* borrowed */
        if (current == NULL) {
            if (PyErr_Occurred()) {
                return NULL;
            }
            continue;
        }
        if (current == PyTuple_GET_ITEM(pair, 1) && PyDict_DelItem(pending, key) < 0) {
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
    const char *key;
    Py_ssize_t len;
    Py_ssize_t index;
} KeyRef;

static int keyref_compare(const void *a, const void *b)
{
    const KeyRef *x = a, *y = b;
    Py_ssize_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, (size_t)n);
    if (c != 0) {
        return c;
    }
    if (x->len != y->len) {
        return x->len < y->len ? -1 : 1;
    }
    return x->index < y->index ? -1 : (x->index > y->index);
}

/* fill(batch, records): batch.put(key, value) for each pair of the list `records`, or
 * batch.delete(key) when value is None, in key order (see KeyRef); a list with a key that
 * is not exactly bytes goes in its own order (rocksdict raises on that key).  The engine's
 * WriteBatch fill without a Python loop.  The first error of a put or delete is raised at once. */
static PyObject *fill(PyObject *self, PyObject *args)
{
    PyObject *batch, *records;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!", &batch, &PyList_Type, &records)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(records);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(records, i);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd: not a (key, value) tuple", i);
            return NULL;
        }
    }
    KeyRef *order = NULL;
    if (n > 1) {
        order = PyMem_Malloc((size_t)n * sizeof(KeyRef));
        if (order == NULL) {
            return PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *key = PyTuple_GET_ITEM(PyList_GET_ITEM(records, i), 0);
            if (!PyBytes_CheckExact(key)) {
                PyMem_Free(order);
                order = NULL;
                break;
            }
            order[i].key = PyBytes_AS_STRING(key);
            order[i].len = PyBytes_GET_SIZE(key);
            order[i].index = i;
        }
        if (order != NULL) {
            qsort(order, (size_t)n, sizeof(KeyRef), keyref_compare);
        }
    }
    PyObject *put = PyObject_GetAttrString(batch, "put");
    PyObject *delete = put == NULL ? NULL : PyObject_GetAttrString(batch, "delete");
    PyObject *result = delete == NULL ? NULL : Py_None;
    for (Py_ssize_t i = 0; result != NULL && i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(records, order == NULL ? i : order[i].index);
        PyObject *out;
        if (PyTuple_GET_ITEM(pair, 1) == Py_None) {
            out = PyObject_CallOneArg(delete, PyTuple_GET_ITEM(pair, 0));
        } else {
            PyObject *kv[2] = {PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)};
            out = PyObject_Vectorcall(put, kv, 2, NULL);
        }
        if (out == NULL) {
            result = NULL;
        } else {
            Py_DECREF(out);
        }
    }
    PyMem_Free(order);
    Py_XDECREF(put);
    Py_XDECREF(delete);
    return result == NULL ? NULL : Py_NewRef(Py_None);
}

static PyMethodDef methods[] = {
    {"forget", forget, METH_VARARGS,
     "forget(pending, records): drop each committed (key, value) still buffered as is."},
    {"fill", fill, METH_VARARGS,
     "fill(batch, records): batch.put(key, value), or batch.delete(key) for None, per record."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_put",
    .m_doc = "The store layer's compiled write path: the typed put, forget, the WriteBatch fill.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__put(void)
{
    if (PyType_Ready(&PutterType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(m, "Putter", (PyObject *)&PutterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
