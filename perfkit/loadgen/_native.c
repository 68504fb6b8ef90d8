/* perfkit's compiled sender as a Python module: the CPython type `Http1Core` over the core
 * (_native_core.c), and the HPACK decoder on its own for tests. This is the only file that speaks
 * to the interpreter: it parses a Core's arguments, picks its protocol (HTTP/1.1; with
 * `grpc_block`, unary gRPC over HTTP/2; with `stream_suffix` too, streamed gRPC on one
 * ModelStreamInfer stream, each record then coming with its responses' arrival times:
 * `resp_counts`, `resp_ns`, handed over by swap with the records), and waits for the core's
 * commands with the GIL released. See _native_core.h for how the files fit together.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first: it sets _GNU_SOURCE and friends before any system header */

#include "_native_core.h"
#include "_native_hpack.h"
#include "_native_protocols.h"

typedef struct {
    PyObject_HEAD
    Core core;
} Sender;

/* -- the Python type ------------------------------------------------------------------------ */
/* Run a command and wait for the loop to finish it, with the GIL released. */
static void run_cmd(Core *c, int cmd) {
    Py_BEGIN_ALLOW_THREADS
    core_command(c, cmd);
    Py_END_ALLOW_THREADS
}

static int Core_init(Sender *self, PyObject *args, PyObject *kw) {
    Core *c = &self->core;
    static char *names[] = {"host", "port", "payloads", "statuses", "grpc_block", "h2_connections", "h2_first_sid",
                            "stream_suffix", NULL};
    const char *host;
    int port;
    PyObject *payloads, *statuses;
    Py_buffer block = {0};
    int h2_connections = 2;
    unsigned int h2_first_sid = 1; /* tests start near the last stream id */
    Py_buffer suffix = {0};
    if (c->ops) {
        PyErr_SetString(PyExc_RuntimeError, "the sender is already set up");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "siOO|y*iIy*", names, &host, &port, &payloads, &statuses, &block,
                                     &h2_connections, &h2_first_sid, &suffix))
        return -1;
    if (suffix.buf && (!block.buf || suffix.len > 200)) {
        PyBuffer_Release(&block);
        PyBuffer_Release(&suffix);
        PyErr_SetString(PyExc_ValueError, "stream_suffix goes with grpc_block, at most 200 bytes");
        return -1;
    }
    int rc;
    if (block.buf && suffix.buf) /* streaming: payloads are ModelInferRequests, framed per request */
        rc = h2_stream_setup(c, block.buf, (size_t)block.len, h2_first_sid | 1, suffix.buf, (size_t)suffix.len);
    else if (block.buf) /* gRPC: payloads are gRPC messages, block the request's HPACK header block */
        rc = h2_unary_setup(c, block.buf, (size_t)block.len, h2_connections, h2_first_sid | 1);
    else
        rc = http1_setup(c);
    PyBuffer_Release(&block);
    PyBuffer_Release(&suffix);
    if (rc < 0) {
        PyErr_NoMemory();
        return -1;
    }
    if (!PyArg_ParseTuple(statuses, "iiiii|ii", &c->st_closed, &c->st_refused, &c->st_protocol, &c->st_unfinished,
                          &c->st_dropped, &c->st_grpc_base, &c->st_stream_error))
        return -1;
    PyObject *seq = PySequence_Fast(payloads, "payloads must be a sequence of bytes");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "at least one payload is needed");
        return -1;
    }
    c->payloads = calloc((size_t)n, sizeof(char *));
    c->payload_lens = calloc((size_t)n, sizeof(size_t));
    if (!c->payloads || !c->payload_lens) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    c->n_payloads = (size_t)n;
    for (Py_ssize_t i = 0; i < n; i++) {
        char *data;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, i), &data, &len) < 0) {
            Py_DECREF(seq);
            return -1;
        }
        c->payloads[i] = malloc((size_t)len ? (size_t)len : 1);
        if (!c->payloads[i]) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        memcpy(c->payloads[i], data, (size_t)len);
        c->payload_lens[i] = (size_t)len;
        if ((size_t)len > c->largest) c->largest = (size_t)len;
    }
    Py_DECREF(seq);
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    Py_BEGIN_ALLOW_THREADS
    rc = getaddrinfo(host, portstr, &hints, &res);
    Py_END_ALLOW_THREADS
    if (rc != 0 || !res) {
        PyErr_Format(PyExc_OSError, "cannot resolve %s: %s", host, gai_strerror(rc));
        return -1;
    }
    memcpy(&c->addr, res->ai_addr, res->ai_addrlen);
    c->addrlen = res->ai_addrlen;
    freeaddrinfo(res);
    if (core_start(c) < 0) {
        if (errno == EAGAIN)
            PyErr_SetString(PyExc_OSError, "cannot start the sender thread");
        else
            PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

static PyObject *Core_start_closed(Sender *self, PyObject *args) {
    int share;
    if (!PyArg_ParseTuple(args, "i", &share)) return NULL;
    core_set_closed(&self->core, share);
    run_cmd(&self->core, CMD_START);
    Py_RETURN_NONE;
}

/* start_open(t0_ns, first_dues: bytes of int64, ended, warm, spare_target, max_outstanding,
              realtime, low_water, drop_message) */
static PyObject *Core_start_open(Sender *self, PyObject *args) {
    long long t0;
    Py_buffer dues;
    int ended, warm, spare, max_out, realtime, low;
    const char *drop;
    if (!PyArg_ParseTuple(args, "Ly*piiipis", &t0, &dues, &ended, &warm, &spare, &max_out, &realtime, &low, &drop))
        return NULL;
    core_set_open(&self->core, (int64_t)t0, (const int64_t *)dues.buf, (size_t)dues.len / sizeof(int64_t), ended, warm,
                  spare, max_out, realtime, low, drop);
    PyBuffer_Release(&dues);
    run_cmd(&self->core, CMD_START);
    Py_RETURN_NONE;
}

/* feed(dues: bytes of int64, ended): more due offsets for the open loop. */
static PyObject *Core_feed(Sender *self, PyObject *args) {
    Py_buffer dues;
    int ended;
    if (!PyArg_ParseTuple(args, "y*p", &dues, &ended)) return NULL;
    core_feed(&self->core, (const int64_t *)dues.buf, (size_t)dues.len / sizeof(int64_t), ended);
    PyBuffer_Release(&dues);
    Py_RETURN_NONE;
}

/* wait_for_demand(timeout_s) -> True when the open loop wants more dues, False when it no longer runs. */
static PyObject *Core_wait_for_demand(Sender *self, PyObject *args) {
    double timeout_s;
    if (!PyArg_ParseTuple(args, "d", &timeout_s)) return NULL;
    int result;
    Py_BEGIN_ALLOW_THREADS
    result = core_wait_hungry(&self->core, timeout_s);
    Py_END_ALLOW_THREADS
    if (result < 0) Py_RETURN_NONE;
    return PyBool_FromLong(result);
}

static PyObject *take(Core *c) {
    /* called with mu held */
    PyObject *recs = PyBytes_FromStringAndSize((const char *)c->recs, (Py_ssize_t)(c->n_recs * sizeof(record_t)));
    PyObject *examples = PyDict_New();
    for (int i = 0; examples && recs && i < c->n_examples; i++) {
        PyObject *key = PyLong_FromLong(c->examples[i].status);
        PyObject *val = PyUnicode_DecodeUTF8(c->examples[i].text, (Py_ssize_t)c->examples[i].len, "replace");
        if (key && val) PyDict_SetItem(examples, key, val);
        Py_XDECREF(key);
        Py_XDECREF(val);
    }
    long reconnects = c->reconnects;
    PyObject *counts = NULL, *times = NULL;
    if (c->streaming) {
        counts = PyBytes_FromStringAndSize((const char *)c->resp_counts, (Py_ssize_t)(c->n_recs * sizeof(uint32_t)));
        times = PyBytes_FromStringAndSize((const char *)c->resp_ns, (Py_ssize_t)(c->n_resp_ns * sizeof(int64_t)));
    }
    c->n_recs = 0;
    c->n_resp_ns = 0;
    c->n_examples = 0;
    c->reconnects = 0;
    if (!recs || !examples || (c->streaming && (!counts || !times))) {
        Py_XDECREF(recs);
        Py_XDECREF(examples);
        Py_XDECREF(counts);
        Py_XDECREF(times);
        return NULL;
    }
    if (c->streaming) return Py_BuildValue("(NNlNN)", recs, examples, reconnects, counts, times);
    return Py_BuildValue("(NNl)", recs, examples, reconnects);
}

static PyObject *Core_swap(Sender *self, PyObject *Py_UNUSED(ignored)) {
    Core *c = &self->core;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&c->mu);
    Py_END_ALLOW_THREADS
    PyObject *out = take(c);
    pthread_mutex_unlock(&c->mu);
    return out;
}

static PyObject *Core_stop(Sender *self, PyObject *args) {
    double drain_s;
    const char *message;
    if (!PyArg_ParseTuple(args, "ds", &drain_s, &message)) return NULL;
    core_set_stop(&self->core, drain_s, message);
    run_cmd(&self->core, CMD_STOP);
    return Core_swap(self, NULL);
}

static void shutdown_core(Core *c) {
    if (!c->thread_started) return;
    Py_BEGIN_ALLOW_THREADS
    core_shutdown(c);
    Py_END_ALLOW_THREADS
}

static PyObject *Core_close(Sender *self, PyObject *Py_UNUSED(ignored)) {
    shutdown_core(&self->core);
    Py_RETURN_NONE;
}

static void Core_dealloc(Sender *self) {
    shutdown_core(&self->core);
    core_free(&self->core);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Core_methods[] = {
    {"start_closed", (PyCFunction)Core_start_closed, METH_VARARGS, "start_closed(share): a closed loop of share slots"},
    {"start_open", (PyCFunction)Core_start_open, METH_VARARGS, "start an open loop (see _native_engine)"},
    {"feed", (PyCFunction)Core_feed, METH_VARARGS, "feed(dues, ended): more due offsets (int64 ns) for the open loop"},
    {"wait_for_demand", (PyCFunction)Core_wait_for_demand, METH_VARARGS,
     "wait_for_demand(timeout_s): True when the open loop wants more dues, False when it stopped, None on timeout"},
    {"swap", (PyCFunction)Core_swap, METH_NOARGS, "swap() -> (records bytes, examples, reconnects[, uint32 response counts per record, int64 "
     "response times]) since the last swap"},
    {"stop", (PyCFunction)Core_stop, METH_VARARGS, "stop(drain_s, unfinished_message) -> swap() after the drain"},
    {"close", (PyCFunction)Core_close, METH_NOARGS, "close every connection and end the sender thread"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "perfkit.loadgen._native.Http1Core",
    .tp_basicsize = sizeof(Sender),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "HTTP/1.1 keep-alive (or, with grpc_block, gRPC over HTTP/2) sender on a thread of its own (see the "
              "module's source)",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
};

/* -- for tests: the HPACK decoder on its own -------------------------------------------------- */
static void append_field(void *ctx, const char *name, size_t nl, const char *value, size_t vl) {
    PyObject *pair = Py_BuildValue("(y#y#)", name, (Py_ssize_t)nl, value, (Py_ssize_t)vl);
    if (pair) PyList_Append((PyObject *)ctx, pair);
    Py_XDECREF(pair);
}

/* hpack_decode(blocks) -> [[(name, value), ...] per block]: the blocks decoded in order with one
   decoder (one connection's dynamic table); ValueError on a block the decoder rejects. */
static PyObject *hpack_decode_py(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *blocks;
    if (!PyArg_ParseTuple(args, "O", &blocks)) return NULL;
    PyObject *seq = PySequence_Fast(blocks, "blocks must be a sequence of bytes");
    if (!seq) return NULL;
    hpack_t hp;
    hpack_init(&hp);
    PyObject *out = PyList_New(0);
    for (Py_ssize_t i = 0; out && i < PySequence_Fast_GET_SIZE(seq); i++) {
        char *data;
        Py_ssize_t len;
        PyObject *fields = PyList_New(0);
        if (!fields || PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, i), &data, &len) < 0) {
            Py_XDECREF(fields);
            Py_CLEAR(out);
            break;
        }
        hpack_result_t res;
        char err[120];
        if (hpack_decode(&hp, (const uint8_t *)data, (size_t)len, &res, err, sizeof err, append_field, fields) < 0) {
            PyErr_Format(PyExc_ValueError, "block %zd: %s", i, err);
            Py_DECREF(fields);
            Py_CLEAR(out);
            break;
        }
        PyList_Append(out, fields);
        Py_DECREF(fields);
    }
    hpack_free(&hp);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef module_functions[] = {
    {"hpack_decode", hpack_decode_py, METH_VARARGS,
     "hpack_decode(blocks) -> the fields of each header block, decoded in order by one HPACK decoder"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, .m_name = "_native",
                                    .m_doc = "perfkit's compiled HTTP/1.1 and gRPC sender", .m_size = -1,
                                    .m_methods = module_functions};

PyMODINIT_FUNC PyInit__native(void) {
    hpack_setup();
    if (PyType_Ready(&CoreType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&CoreType);
    if (PyModule_AddObject(m, "Http1Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(&CoreType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "RECORD_BYTES", (long)sizeof(record_t));
    PyModule_AddIntConstant(m, "H2_LAST_SID", (long)H2_LAST_SID);
    return m;
}
