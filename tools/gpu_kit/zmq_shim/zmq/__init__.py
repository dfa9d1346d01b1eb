"""A stand-in for the few pyzmq calls the GPU kit's Python runs make, over
libzmq through ctypes, for the GPU machine, which has libzmq's library (the
kit carries it) but no pyzmq and no way to install it.

It is not pyzmq: only what tests/python/mp_client.py, cuda_worker.py,
test_gpu_cuda.py, test_gpu_torch.py and tools/gpu_bench.py call exists here
(Context, socket, setsockopt, connect, send_multipart, recv_multipart,
poll, close, destroy, term). The kit puts this folder on PYTHONPATH only
where `import zmq` fails, and names the libzmq to load in LMC_LIBZMQ.

Thread-safety: as libzmq's (a socket belongs to one thread).
"""
import ctypes
import os

DEALER, ROUTER, PUB, SUB = 5, 6, 1, 2
LINGER, SUBSCRIBE, RCVMORE = 17, 6, 13
POLLIN, POLLOUT = 1, 2
DONTWAIT, SNDMORE = 1, 2
_EAGAIN = 11


def _load():
    path = os.environ.get("LMC_LIBZMQ", "libzmq.so.5")
    lib = ctypes.CDLL(path, use_errno=True)
    lib.zmq_ctx_new.restype = ctypes.c_void_p
    lib.zmq_ctx_term.argtypes = [ctypes.c_void_p]
    lib.zmq_socket.restype = ctypes.c_void_p
    lib.zmq_socket.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.zmq_close.argtypes = [ctypes.c_void_p]
    lib.zmq_setsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t]
    lib.zmq_getsockopt.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                   ctypes.POINTER(ctypes.c_size_t)]
    lib.zmq_connect.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.zmq_bind.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    lib.zmq_send.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    lib.zmq_msg_init.argtypes = [ctypes.c_void_p]
    lib.zmq_msg_recv.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    lib.zmq_msg_data.restype = ctypes.c_void_p
    lib.zmq_msg_data.argtypes = [ctypes.c_void_p]
    lib.zmq_msg_size.restype = ctypes.c_size_t
    lib.zmq_msg_size.argtypes = [ctypes.c_void_p]
    lib.zmq_msg_more.argtypes = [ctypes.c_void_p]
    lib.zmq_msg_close.argtypes = [ctypes.c_void_p]
    lib.zmq_poll.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_long]
    lib.zmq_errno.restype = ctypes.c_int
    lib.zmq_strerror.restype = ctypes.c_char_p
    lib.zmq_strerror.argtypes = [ctypes.c_int]
    return lib


_lib = _load()


class ZMQError(Exception):
    def __init__(self, errno=None):
        self.errno = _lib.zmq_errno() if errno is None else errno
        super().__init__(_lib.zmq_strerror(self.errno).decode())


class Again(ZMQError):
    pass


def _check(rc):
    if rc < 0:
        err = _lib.zmq_errno()
        raise Again(err) if err == _EAGAIN else ZMQError(err)
    return rc


class _PollItem(ctypes.Structure):
    _fields_ = [("socket", ctypes.c_void_p), ("fd", ctypes.c_int), ("events", ctypes.c_short),
                ("revents", ctypes.c_short)]


class Socket:
    def __init__(self, context, kind):
        self.context = context
        self.handle = _lib.zmq_socket(context.handle, kind)
        if not self.handle:
            raise ZMQError()
        self.closed = False

    def setsockopt(self, option, value):
        if isinstance(value, bytes):
            buf = ctypes.create_string_buffer(value, len(value))
            _check(_lib.zmq_setsockopt(self.handle, option, buf, len(value)))
        else:
            v = ctypes.c_int(int(value))
            _check(_lib.zmq_setsockopt(self.handle, option, ctypes.byref(v), ctypes.sizeof(v)))

    def connect(self, url):
        _check(_lib.zmq_connect(self.handle, url.encode()))

    def bind(self, url):
        _check(_lib.zmq_bind(self.handle, url.encode()))

    def send_multipart(self, frames, flags=0):
        frames = [bytes(f) for f in frames]
        for i, frame in enumerate(frames):
            more = SNDMORE if i + 1 < len(frames) else 0
            buf = ctypes.create_string_buffer(frame, len(frame)) if frame else None
            _check(_lib.zmq_send(self.handle, buf, len(frame), flags | more))

    def send(self, frame, flags=0):
        self.send_multipart([frame], flags)

    def recv_multipart(self, flags=0):
        frames = []
        msg = ctypes.create_string_buffer(64)  # zmq_msg_t
        while True:
            _check(_lib.zmq_msg_init(msg))
            try:
                _check(_lib.zmq_msg_recv(msg, self.handle, flags))
                size = _lib.zmq_msg_size(msg)
                frames.append(ctypes.string_at(_lib.zmq_msg_data(msg), size) if size else b"")
                more = _lib.zmq_msg_more(msg)
            finally:
                _lib.zmq_msg_close(msg)
            if not more:
                return frames

    def recv(self, flags=0):
        return self.recv_multipart(flags)[0]

    def poll(self, timeout=None, flags=POLLIN):
        item = _PollItem(self.handle, 0, flags, 0)
        _check(_lib.zmq_poll(ctypes.byref(item), 1, -1 if timeout is None else int(timeout)))
        return item.revents & flags

    def close(self, linger=None):
        if self.closed:
            return
        if linger is not None:
            self.setsockopt(LINGER, linger)
        _lib.zmq_close(self.handle)
        self.closed = True
        self.context.sockets.discard(self)


class Context:
    def __init__(self):
        self.handle = _lib.zmq_ctx_new()
        if not self.handle:
            raise ZMQError()
        self.sockets = set()

    def socket(self, kind):
        s = Socket(self, kind)
        self.sockets.add(s)
        return s

    def destroy(self, linger=None):
        for s in list(self.sockets):
            s.close(linger)
        self.term()

    def term(self):
        if self.handle:
            _lib.zmq_ctx_term(self.handle)
            self.handle = None
