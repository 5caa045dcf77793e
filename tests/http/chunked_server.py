#!/usr/bin/env python3
"""A third-party stand-in for batchd-http: Python's standard-library HTTP server answering
POST /v1/batchstring with batchd-http's JSON contract (docs/HTTP.md) and the reference answer
(lowercase hex SHA-256 of the input's UTF-8 bytes, cost 1), so tests can load it with
batchd-stress --http. Like uvicorn-based servers it answers with Transfer-Encoding: chunked, on
HTTP/1.1 keep-alive connections, each chunk in a write of its own.

Usage: chunked_server.py PORT_FILE [--mode right|wrong|eof]
  right  chunked answers, correct
  wrong  chunked answers, but the hash of something else: every answer is wrong
  eof    no Content-Length and no chunks: the body ends where the connection does
It listens on 127.0.0.1 at a free port, which it writes to PORT_FILE once it accepts.
"""
import argparse
import hashlib
import http.server
import json
import os
import socket
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "right"

    def setup(self):
        super().setup()
        # Small writes go out at once: each chunk is its own TCP segment, as a streaming server's.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path.split("?")[0] != "/v1/batchstring":
            self.answer(404, {"error": {"code": "not_found", "message": "no such resource"}})
            return
        try:
            text = json.loads(body)["input"]
            if not isinstance(text, str):
                raise TypeError("input is not a string")
        except (ValueError, KeyError, TypeError) as e:
            self.answer(400, {"error": {"code": "bad_request", "message": str(e)}})
            return
        if self.mode == "wrong":
            text += "!"
        self.answer(200, {"output": hashlib.sha256(text.encode()).hexdigest()})

    def answer(self, status, document):
        data = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if self.mode == "eof":
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.close_connection = True
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        half = len(data) // 2
        for piece in (data[:half], data[half:]):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        # The last chunk in two writes, so a reader sees it arrive in pieces.
        self.wfile.write(b"0\r")
        self.wfile.write(b"\n\r\n")


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that hung up mid-answer (one that gave up on the connection) is not the
        # server's error; anything else is printed as usual.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("port_file")
    parser.add_argument("--mode", choices=["right", "wrong", "eof"], default="right")
    args = parser.parse_args()
    Handler.mode = args.mode
    server = Server(("127.0.0.1", 0), Handler)
    temp = args.port_file + ".tmp"
    with open(temp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(temp, args.port_file)  # whole or absent: a reader never sees half a number
    server.serve_forever()


if __name__ == "__main__":
    main()
