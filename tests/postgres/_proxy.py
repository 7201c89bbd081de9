"""A TCP proxy on the loopback that can lose a server's reply after the server sent it."""

from __future__ import annotations

import contextlib
import socket
import threading


class CuttingProxy:
    """Forwards 127.0.0.1:`port` to the server; `cut_reply_containing` drops a reply.

    Once armed, the first server reply holding the marker is thrown away and both
    sides of that connection are closed: the server did the work, and the client
    sees only a lost connection. The proxy then forwards normally again.
    """

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._marker: bytes | None = None
        self.cuts = 0
        self._guard = threading.Lock()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_reply_containing(self, marker: bytes) -> None:
        """Drop the next server reply that holds `marker`, with its connection."""
        with self._guard:
            self._marker = marker

    def close(self) -> None:
        """Stop accepting and close every forwarded connection."""
        self._listener.close()
        with self._guard:
            for sock in self._sockets:
                _close(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._target)
            with self._guard:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies and self._should_cut(data):
                    break
                sink.sendall(data)
        except OSError:
            pass
        _close(source)
        _close(sink)

    def _should_cut(self, data: bytes) -> bool:
        with self._guard:
            if self._marker is not None and self._marker in data:
                self._marker = None
                self.cuts += 1
                return True
        return False


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
