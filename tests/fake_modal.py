"""A Modal control plane on loopback that the official client (the `modal` package) talks to
unchanged: `MODAL_SERVER_URL=http://127.0.0.1:PORT` is the client's own setting.

Built on the generated service base (`modal_proto.api_grpc.ModalClientBase`, grpclib): every
RPC gets an empty reply with its `*_id` fields filled, and the calls on gpu-router's path are
answered with content: the token checked at ClientHello, mounts stored by content hash (a file
whose hash is known is not sent again), images by their definition, volumes by name, and a
spawned function really run. Its mounts are laid out in a folder as in a container (each file
at its remote path under `fs/`, each volume a lasting folder at its mount path), and the module
the function names is imported there by this Python in a subprocess that calls the function
with the pickled input; standard output is the call's log (AppFetchLogs), the pickled return
value its result (FunctionGetOutputs). The function's timeout is enforced (the result is then
GENERIC_STATUS_TIMEOUT; `timeout_kill_after_s` keeps the container running a moment after
that), and FunctionCallCancel stops the process (GENERIC_STATUS_TERMINATED). A running input is
preempted as Modal does it (`preempt`, or `preempt_when` a file appears on the volume): a signal
(SIGINT to the main process by default; SIGTERM, or to every process, as other runtimes send),
a grace period, SIGKILL, and the same input in a new container of the same call.

A volume is read from outside as the client reads it: VolumeListFiles (VolumeListFiles2 for a
v2 volume) lists a folder with paths relative to the volume's root, and VolumeGetFile2 answers
with one URL per 8 MiB block (the client's BLOCK_SIZE), which a loopback HTTP server serves
with a `Repr-Digest`, as Modal's presigned block URLs are. `volume_extra` adds entries a real
folder cannot hold (a hostile server's names: `job/ckpt/../x`, `/etc/x`) to a volume's listing,
with the bytes their URLs serve; `block_gets` records each block served, by volume path;
`refuse_reads` makes every read fail.

Every call is recorded (`calls`: method, request, whether it carried the token) so tests assert
what was asked: GPU type, timeout, image packages, network blocked, bytes sent (`received`: each
file's hash and content as MountPutFile brought it). As strict as Modal where gpu-router's
requests could go wrong: FunctionCreate refuses a GPU type Modal does not have and a count
outside what one container gets (`H100:0`, `H100:9`: 1 to 8, A10 to 4), and an image built
`FROM` something that is not a registry reference fails its build (`refused` records both);
`image_defs` keeps each image's definition, `base_image`/`image_chain` read its layers. As on Modal, a mount names files by hash
and may name only contents the server already holds: the client asks which hashes are missing
(MountBatchedCheckExistence) and sends only those; a mount naming a hash never sent is
refused. Files over the client's 4 MiB limit go to a blob first (BlobCreate, then a PUT to the
URL it gives, served by the same loopback HTTP server, checked against the announced length
and sha256), and MountPutFile names the blob.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import http.server
import secrets
import itertools
import os
import pickle
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from grpclib import GRPCError, Status
from grpclib.const import Cardinality
from grpclib.server import Server
from modal_proto import api_grpc, api_pb2

# The container's main process. Like a container's PID 1, a signal it has no handler for does
# nothing (the kernel's rule for a pid namespace's init): SIGTERM is ignored unless the function
# sets a handler; Python's own SIGINT handler (KeyboardInterrupt) runs. Its children, exec'd,
# get every default back.
RUNNER = r"""
import importlib, pickle, signal, sys
signal.signal(signal.SIGTERM, lambda signum, frame: None)
root, module, name, src, dst = sys.argv[1:6]
sys.path.insert(0, root)
args, kwargs = pickle.load(open(src, "rb"))
fn = getattr(importlib.import_module(module), name)
try:
    out = ("ok", fn(*args, **kwargs))
except BaseException as exc:
    import traceback
    traceback.print_exc()
    out = ("err", repr(exc))
pickle.dump(out, open(dst, "wb"))
"""

GR = api_pb2.GenericResult

# What Modal's servers accept, as its guide says it (https://modal.com/docs/guide/gpu): the GPU
# types a function may name (the client sends the name upper-cased, the count after a colon as
# `count`), and how many of one type one container gets: B200, H200, H100, A100, L4, T4 and L40S
# up to 8, A10 up to 4. Anything else is refused at FunctionCreate, as Modal refuses it.
GPU_TYPES_MAX = {"T4": 8, "L4": 8, "A10": 4, "A10G": 4, "L40S": 8, "A100": 8, "A100-40GB": 8,
                 "A100-80GB": 8, "RTX-PRO-6000": 8, "H100": 8, "H100!": 8, "H200": 8, "B200": 8,
                 "B200+": 8}
# A registry image reference as a registry takes it (github.com/distribution/reference's
# grammar): a build `FROM` anything else fails, as Modal's builder fails to pull it
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::[0-9]+)?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REF_RE = re.compile(rf"^(?:{_DOMAIN}/)?{_PATH}(?:/{_PATH})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?"
                          r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?\Z")


class Call:
    def __init__(self, fc_id: str, function: Any, root: Path) -> None:
        self.id = fc_id
        self.function = function
        self.root = root
        self.proc: subprocess.Popen | None = None
        self.status: int | None = None  # a GenericResult status once ended
        self.result: bytes = b""
        self.exception = ""
        self.logs: list[tuple[float, str]] = []
        self.started = time.time()
        self.input: Any = None  # the input, kept: a preempted one runs again (FakeModal.preempt)
        self.containers = 0  # how many containers ran it
        self.preempted: list[subprocess.Popen] = []  # containers whose end is not the input's end


class FakeModal:
    def __init__(self, root: Path, *, token_id: str, token_secret: str) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.token_id, self.token_secret = token_id, token_secret
        self.calls: list[dict] = []
        self.files: dict[str, bytes] = {}  # sha256 -> content
        self.uploaded_bytes = 0
        self.received: list[tuple[str, bytes]] = []  # (sha256, content) of each file sent, in order
        self.mounts: dict[str, list[tuple[str, str]]] = {}  # mount id -> [(remote path, sha)]
        self.images: dict[str, str] = {}
        self.image_defs: dict[str, Any] = {}  # image id -> the definition (api_pb2.Image) it was built from
        self.refused: list[tuple[str, str]] = []  # (method, why) of each request refused as Modal would
        self.volumes: dict[str, str] = {}  # name -> id
        self.functions: dict[str, Any] = {}
        self.function_calls: dict[str, Call] = {}
        self.call_app: dict[str, str] = {}
        self.volume_extra: dict[str, dict[str, bytes]] = {}  # volume name -> {listed path: content}
        self.block_gets: list[str] = []  # the volume path of each block served
        self.refuse_reads = False  # VolumeGetFile2 answers PERMISSION_DENIED (a read that fails)
        # a call at its timeout is reported at once and its container stopped this much later
        # (as a real one may go on a moment after Modal says the input timed out)
        self.timeout_kill_after_s = 0.0
        self.preemptions: list[tuple[str, int, str]] = []  # (call id, signal, to) of each preemption
        self._closed = threading.Event()
        self._blocks: dict[str, tuple[str, Any, int, int]] = {}  # token -> (path, source, start, length)
        self._uploads: dict[str, tuple[str, int, str]] = {}  # PUT token -> (blob id, length, sha256 b64)
        self._blobs: dict[str, bytes] = {}  # blob id -> content, once PUT whole
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)
        self._http = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._block_handler())
        self._http.daemon_threads = True
        self.blocks_url = f"http://127.0.0.1:{self._http.server_address[1]}"
        threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    # -- serving ------------------------------------------------------------------------------

    def _serve(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = Server([self._servicer()])
        self._loop.run_until_complete(self._server.start("127.0.0.1", self.port))
        ready.set()
        self._loop.run_forever()

    def close(self) -> None:
        self._closed.set()
        for call in self.function_calls.values():
            self._kill(call)
        self._http.shutdown()
        self._http.server_close()
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def _servicer(self):
        base = api_grpc.ModalClientBase
        probe = type("P", (base,), {n: (lambda self, s: None) for n in base.__abstractmethods__})()
        ns = {}
        for path, handler in base.__mapping__(probe).items():
            ns[path.rsplit("/", 1)[-1]] = self._make(path.rsplit("/", 1)[-1], handler)
        cls = type("FakeModalServicer", (base,), ns)
        cls.__abstractmethods__ = frozenset()
        return cls()

    def _make(self, name: str, handler):
        fake = self

        async def h(_self, stream):
            if handler.cardinality in (Cardinality.UNARY_UNARY, Cardinality.UNARY_STREAM):
                req = await stream.recv_message()
            else:
                req = None
                async for _ in stream:
                    pass
            md = dict(stream.metadata or {})
            authorized = (md.get("x-modal-token-id") == fake.token_id
                          and md.get("x-modal-token-secret") == fake.token_secret)
            with fake._lock:
                fake.calls.append({"method": name, "request": req, "authorized": authorized,
                                   "raw": bytes(req.SerializeToString()) if req is not None else b""})
            if not authorized:
                raise GRPCError(Status.UNAUTHENTICATED, "Token missing or invalid")
            own = getattr(fake, f"_m_{name}", None)
            rep = own(req) if own else handler.reply_type()
            for f in rep.DESCRIPTOR.fields:
                if f.name.endswith("_id") and f.type == f.TYPE_STRING and not getattr(f, "is_repeated", False) \
                        and not getattr(rep, f.name):
                    setattr(rep, f.name, f"{f.name.split('_')[0][:2]}-{next(fake._ids)}")
            if handler.cardinality in (Cardinality.UNARY_UNARY, Cardinality.STREAM_UNARY) or name != "AppGetLogs":
                await stream.send_message(rep)
        return h

    def _id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids)}"

    def requests(self, method: str) -> list[Any]:
        return [c["request"] for c in self.calls if c["method"] == method]

    # -- answers ------------------------------------------------------------------------------

    def _m_EnvironmentGetOrCreate(self, req):
        return api_pb2.EnvironmentGetOrCreateResponse(environment_id="en-main", metadata=api_pb2.EnvironmentMetadata(
            name="main", settings=api_pb2.EnvironmentSettings(image_builder_version="2025.06")))

    def _m_AppCreate(self, req):
        return api_pb2.AppCreateResponse(app_id=self._id("ap"), app_page_url="http://127.0.0.1/app")

    def _m_ImageGetOrCreate(self, req):
        key = hashlib.sha256(req.image.SerializeToString(deterministic=True)).hexdigest()[:16]
        self.images.setdefault(key, f"im-{key}")
        self.image_defs[self.images[key]] = req.image
        why = self._image_problem(req.image)
        if why:  # the build fails (the client raises ImageBuildError with this text)
            self.refused.append(("ImageGetOrCreate", why))
            return api_pb2.ImageGetOrCreateResponse(image_id=self.images[key], result=GR(
                status=GR.GENERIC_STATUS_FAILURE, exception=why))
        return api_pb2.ImageGetOrCreateResponse(image_id=self.images[key], result=GR(status=GR.GENERIC_STATUS_SUCCESS))

    def _image_problem(self, image) -> str:
        """Why Modal's builder could not build this definition ("" when it could): each `FROM`
        names a registry image (a reference it can pull) or one of the layer's base images."""
        bases = {b.docker_tag for b in image.base_images}
        for command in image.dockerfile_commands:
            if command.split(None, 1)[0].upper() != "FROM":
                continue
            ref = command.split(None, 1)[1].strip() if len(command.split(None, 1)) > 1 else ""
            if ref in bases:
                continue
            if not IMAGE_REF_RE.match(ref):
                return f"failed to pull {ref!r}: invalid reference format"
        return ""

    def base_image(self, image_id: str) -> str | None:
        """The registry image a built image (or the layers below it) was built FROM, or None."""
        image = self.image_defs.get(image_id)
        while image is not None:
            for command in image.dockerfile_commands:
                if command.upper().startswith("FROM ") and command.split()[1] not in \
                        {b.docker_tag for b in image.base_images}:
                    return command.split()[1]
            image = self.image_defs.get(image.base_images[0].image_id) if image.base_images else None
        return None

    def image_chain(self, image_id: str) -> list[Any]:
        """The definitions of a built image and the layers below it, the top one first."""
        out = []
        image = self.image_defs.get(image_id)
        while image is not None:
            out.append(image)
            image = self.image_defs.get(image.base_images[0].image_id) if image.base_images else None
        return out

    def _m_ImageJoinStreaming(self, req):
        return api_pb2.ImageJoinStreamingResponse(result=GR(status=GR.GENERIC_STATUS_SUCCESS))

    def _m_MountBatchedCheckExistence(self, req):
        return api_pb2.MountBatchedCheckExistenceResponse(
            missing_sha256_hex_hashes=[h for h in req.sha256_hex_hashes if h not in self.files])

    def _m_MountPutFile(self, req):
        how = req.WhichOneof("data_oneof")
        if how in ("data", "data_blob_id"):
            data = bytes(req.data) if how == "data" else self._blobs.get(req.data_blob_id)
            if data is None:
                raise GRPCError(Status.NOT_FOUND, f"blob {req.data_blob_id} was never uploaded")
            if hashlib.sha256(data).hexdigest() != req.sha256_hex:
                raise GRPCError(Status.INVALID_ARGUMENT, "file content does not match its sha256")
            self.received.append((req.sha256_hex, data))
            if req.sha256_hex not in self.files:
                self.uploaded_bytes += len(data)
            self.files[req.sha256_hex] = data
        return api_pb2.MountPutFileResponse(exists=req.sha256_hex in self.files)

    def _m_BlobCreate(self, req):
        """A file over the client's 4 MiB limit goes to a blob first: one presigned PUT URL (the
        loopback HTTP server), which takes exactly the announced length and sha256."""
        blob_id, token = self._id("bl"), secrets.token_hex(16)
        self._uploads[token] = (blob_id, req.content_length, req.content_sha256_base64)
        return api_pb2.BlobCreateResponse(blob_ids=[blob_id], upload_urls=api_pb2.UploadUrlList(
            items=[f"{self.blocks_url}/put/{token}"]))

    def _m_MountGetOrCreate(self, req):
        files = [(f.filename, f.sha256_hex) for f in req.files]
        unknown = [name for name, sha in files if sha not in self.files]
        if unknown:  # a mount names only contents the store holds (checked or put before)
            raise GRPCError(Status.FAILED_PRECONDITION, f"{len(unknown)} mount files were never uploaded: "
                            f"{unknown[:3]}")
        key = hashlib.sha256(repr(sorted(files)).encode()).hexdigest()[:16]
        self.mounts[f"mo-{key}"] = files
        return api_pb2.MountGetOrCreateResponse(mount_id=f"mo-{key}",
                                                handle_metadata=api_pb2.MountHandleMetadata(content_checksum_sha256_hex=key))

    def _m_VolumeGetOrCreate(self, req):
        if req.deployment_name not in self.volumes and \
                req.object_creation_type != api_pb2.OBJECT_CREATION_TYPE_CREATE_IF_MISSING:
            raise GRPCError(Status.NOT_FOUND, f"Volume '{req.deployment_name}' not found")
        vid = self.volumes.setdefault(req.deployment_name, self._id("vo"))
        return api_pb2.VolumeGetOrCreateResponse(volume_id=vid, metadata=api_pb2.VolumeMetadata(
            name=req.deployment_name, version=api_pb2.VOLUME_FS_VERSION_V1))

    def _m_VolumeDelete(self, req):
        for name, vid in list(self.volumes.items()):
            if vid == req.volume_id:
                del self.volumes[name]
        from google.protobuf import empty_pb2
        return empty_pb2.Empty()

    # -- reading a volume from outside (Volume.listdir / read_file) ---------------------------

    def volume_dir(self, name: str) -> Path:
        """Where volume `name` keeps its files (the folder its mounts link to)."""
        return self.root / "volumes" / self.volumes[name]

    def _volume_name(self, volume_id: str) -> str:
        for name, vid in self.volumes.items():
            if vid == volume_id:
                return name
        raise GRPCError(Status.NOT_FOUND, f"no volume {volume_id}")

    def _m_VolumeListFiles(self, req):
        name = self._volume_name(req.volume_id)
        store = self.volume_dir(name)
        want = req.path.strip("/")
        top = store / want if want else store
        if not (top.exists() or top.is_symlink()) or not top.resolve().is_relative_to(store.resolve()):
            raise GRPCError(Status.NOT_FOUND, f"No such file or directory: {req.path}")
        rep = api_pb2.VolumeListFilesResponse()
        FE = api_pb2.FileEntry

        def add(path: Path) -> None:
            st = path.lstat()
            kind = FE.SYMLINK if path.is_symlink() else FE.DIRECTORY if path.is_dir() else FE.FILE
            rep.entries.add(path=path.relative_to(store).as_posix(), type=kind, mtime=int(st.st_mtime),
                            size=st.st_size if kind == FE.FILE else 0)

        if top.is_dir() and not top.is_symlink():
            for here, dirs, files in os.walk(top):  # links are listed, never followed
                for n in sorted(dirs) + sorted(files):
                    add(Path(here) / n)
                if not req.recursive:
                    break
        else:
            add(top)
        for path, data in self.volume_extra.get(name, {}).items():  # listed whatever was asked
            rep.entries.add(path=path, type=FE.FILE, mtime=int(time.time()), size=len(data))
        if req.max_entries:
            del rep.entries[req.max_entries:]
        return rep

    def _m_VolumeListFiles2(self, req):
        rep = api_pb2.VolumeListFiles2Response()
        rep.entries.extend(self._m_VolumeListFiles(req).entries)
        return rep

    def _m_VolumeGetFile2(self, req):
        from modal._utils.blob_utils import BLOCK_SIZE

        if self.refuse_reads:
            raise GRPCError(Status.PERMISSION_DENIED, "reads of this volume are refused")
        name = self._volume_name(req.volume_id)
        extra = self.volume_extra.get(name, {})
        if req.path in extra:
            source: Any = extra[req.path]
            size = len(source)
        else:
            store = self.volume_dir(name)
            path = store / req.path.strip("/")
            if not path.is_file() or not path.resolve().is_relative_to(store.resolve()):
                raise GRPCError(Status.NOT_FOUND, f"No such file: {req.path}")
            source, size = path, path.stat().st_size
        start = min(int(req.start), size)
        length = size - start if not req.len else min(int(req.len), size - start)
        rep = api_pb2.VolumeGetFile2Response(size=size, start=start, len=length)
        pos, end = start, start + length
        while pos < end:  # one URL per BLOCK_SIZE-aligned block, as the client expects
            stop = min(end, (pos // BLOCK_SIZE + 1) * BLOCK_SIZE)
            token = secrets.token_hex(12)
            self._blocks[token] = (req.path, source, pos, stop - pos)
            rep.get_urls.append(f"{self.blocks_url}/block/{token}")
            pos = stop
        return rep

    def _block_handler(self):
        fake = self

        class Blocks(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server hook
                entry = fake._blocks.get(self.path.rsplit("/", 1)[-1])
                if entry is None:
                    self.send_error(404)
                    return
                path, source, start, length = entry
                if isinstance(source, bytes):
                    body = source[start:start + length]
                else:
                    with open(source, "rb") as f:
                        f.seek(start)
                        body = f.read(length)
                fake.block_gets.append(path)
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
                self.send_header("Repr-Digest", f"sha-256=:{digest}:")
                self.end_headers()
                self.wfile.write(body)

            def do_PUT(self) -> None:  # noqa: N802 - a presigned blob upload (BlobCreate)
                entry = fake._uploads.pop(self.path.rsplit("/", 1)[-1], None)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if entry is None:
                    self.send_error(403, "no such upload")
                    return
                blob_id, length, sha_b64 = entry
                if len(body) != length or base64.b64encode(hashlib.sha256(body).digest()).decode() != sha_b64:
                    self.send_error(400, "the body is not the length and sha256 BlobCreate announced")
                    return
                fake._blobs[blob_id] = body
                self.send_response(200)
                self.send_header("ETag", f'"{hashlib.md5(body).hexdigest()}"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        return Blocks

    def _m_FunctionCreate(self, req):
        gpu = req.function.resources.gpu_config
        if gpu.gpu_type or gpu.count:  # a function with a GPU: one Modal gives, in a count it gives
            most = GPU_TYPES_MAX.get(gpu.gpu_type)
            why = (f"GPU type {gpu.gpu_type!r} is not one of Modal's: {', '.join(GPU_TYPES_MAX)}" if most is None
                   else f"invalid GPU count {gpu.count} for {gpu.gpu_type}: Modal attaches 1 to {most} "
                        f"{gpu.gpu_type} GPUs to a container" if not 1 <= gpu.count <= most else "")
            if why:
                self.refused.append(("FunctionCreate", why))
                raise GRPCError(Status.INVALID_ARGUMENT, why)
        if req.function.image_id and req.function.image_id not in self.image_defs:
            why = f"image {req.function.image_id} was never built"
            self.refused.append(("FunctionCreate", why))
            raise GRPCError(Status.FAILED_PRECONDITION, why)
        fid = req.existing_function_id or self._id("fu")  # the id FunctionPrecreate gave
        self.functions[fid] = req.function
        rep = api_pb2.FunctionCreateResponse(function_id=fid, handle_metadata=api_pb2.FunctionHandleMetadata(
            function_name=req.function.function_name))
        fd = api_pb2.FunctionData(module_name=req.function.module_name, function_name=req.function.function_name,
                                  function_type=req.function.function_type, timeout_secs=req.function.timeout_secs)
        fd.ranked_functions.append(api_pb2.FunctionData.RankedFunction(rank=0, function=req.function))
        rep.function_data.CopyFrom(fd)
        return rep

    def _m_FunctionMap(self, req):
        fc = self._id("fc")
        self.function_calls[fc] = Call(fc, self.functions[req.function_id], self.root / "calls" / fc)
        self.call_app[fc] = req.function_id
        return api_pb2.FunctionMapResponse(function_call_id=fc)

    def _m_FunctionPutInputs(self, req):
        call = self.function_calls[req.function_call_id]
        item = req.inputs[0]
        self._start(call, item.input)
        return api_pb2.FunctionPutInputsResponse(inputs=[api_pb2.FunctionPutInputsResponseItem(
            idx=item.idx, input_id=self._id("in"))])

    def _m_FunctionGetOutputs(self, req):
        call = self.function_calls[req.function_call_id]
        if call.status is None:
            return api_pb2.FunctionGetOutputsResponse(num_unfinished_inputs=1)
        result = GR(status=call.status, exception=call.exception)
        if call.status == GR.GENERIC_STATUS_SUCCESS:
            result.data = call.result
        item = api_pb2.FunctionGetOutputsItem(result=result, data_format=api_pb2.DATA_FORMAT_PICKLE, idx=0)
        return api_pb2.FunctionGetOutputsResponse(outputs=[item], num_unfinished_inputs=0)

    def _m_FunctionCallCancel(self, req):
        call = self.function_calls[req.function_call_id]
        if call.status is None:
            call.status, call.exception = GR.GENERIC_STATUS_TERMINATED, "Input was cancelled by user"
            self._kill(call)
        from google.protobuf import empty_pb2
        return empty_pb2.Empty()

    def _m_FunctionCallFromId(self, req):
        fid = self.call_app.get(req.function_call_id, "")
        return api_pb2.FunctionCallFromIdResponse(function_call_id=req.function_call_id, num_inputs=1,
                                                  metadata=api_pb2.FunctionCallHandleMetadata(app_id="ap-logs",
                                                                                              function_id=fid))

    def _lines(self, req) -> list[tuple[float, str]]:
        call = self.function_calls.get(req.function_call_id)
        if call is None:
            return []
        lo, hi = req.since.ToSeconds() if req.HasField("since") else 0, req.until.ToSeconds() + 1 \
            if req.HasField("until") else 1e18
        return [(t, s) for t, s in list(call.logs) if lo <= t <= hi]

    def _m_AppCountLogs(self, req):
        rep = api_pb2.AppCountLogsResponse()
        size = max(int(req.bucket_secs or 60), 1)
        counts: dict[int, int] = {}
        for t, _ in self._lines(req):
            start = int(t // size * size)
            counts[start] = counts.get(start, 0) + 1
        for start in sorted(counts):
            b = rep.buckets.add(stdout_logs=counts[start])
            b.bucket_start_at.FromSeconds(start)
        return rep

    def _m_AppFetchLogs(self, req):
        rep = api_pb2.AppFetchLogsResponse()
        lines = self._lines(req)
        if lines:
            batch = rep.batches.add(task_id="ta-1", entry_id=str(len(lines)))
            for i, (t, text) in enumerate(lines):
                item = batch.items.add(data=text, file_descriptor=api_pb2.FILE_DESCRIPTOR_STDOUT,
                                        function_call_id=req.function_call_id)
                item.timestamp, item.timestamp_ns = t, int(t * 1e9)
        return rep

    # -- running a function -------------------------------------------------------------------

    def preempt(self, fc_id: str, sig: int = signal.SIGINT, grace_s: float = 3.0, to: str = "main") -> None:
        """Preempt the container running this call's input, as Modal does when it reclaims the
        machine: `sig` (Modal's guide: an interrupt, SIGINT) goes to the container's main process
        (`to="main"`; `to="all"`: to every process in it, as a runtime that signals the whole
        tree, SIGTERM in Kubernetes' manner), exit handlers get `grace_s`, then every process of
        the container is killed (SIGKILL) whether or not it ended, and Modal runs the same input
        again in a new container (a fresh container disk, the same volumes, the same function
        call: its logs go on in the same stream, and the caller sees one result, never one from
        the preempted container, not even one it returned within the grace). Nothing tells the
        caller."""
        call = self.function_calls[fc_id]
        old = call.proc
        assert old is not None and call.status is None, "only a running input is preempted"
        assert to in ("main", "all"), to
        call.preempted.append(old)
        self.preemptions.append((fc_id, int(sig), to))
        if to == "main":
            try:
                os.kill(old.pid, sig)
            except ProcessLookupError:
                pass
        else:
            self._kill(call, sig)
        try:
            old.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        self._kill(call)  # the grace is over: whatever is left goes, exited or not
        old.wait(timeout=30)
        self._start(call, call.input)

    def preempt_when(self, path: str, *, sig: int = signal.SIGINT, grace_s: float = 3.0, to: str = "main") -> None:
        """Arm a preemption: as soon as `path` (relative to a volume's root, e.g. a file the job
        writes at the moment a test wants: between two steps, halfway through a checkpoint
        write) exists on a volume, the running input of the call that mounts that volume is
        preempted (`preempt`), once. Watched every 10 ms, so the job is caught in the state it
        announced (a relay that polls every 0.5 s has most likely not copied its last rows)."""
        def watch() -> None:
            while not self._closed.is_set():
                for vid_dir in (self.root / "volumes").glob("*"):
                    if (vid_dir / path).exists():
                        for call in list(self.function_calls.values()):
                            if call.status is None and call.proc is not None and call.proc.poll() is None \
                                    and any(vm.volume_id == vid_dir.name for vm in call.function.volume_mounts):
                                self.preempt(call.id, sig, grace_s, to)
                                return
                self._closed.wait(0.01)

        threading.Thread(target=watch, daemon=True).start()

    def _start(self, call: Call, inp) -> None:
        call.input = inp
        call.containers += 1
        fs = call.root / f"fs-{call.containers}"  # each container its own disk
        fn = call.function
        for mid in fn.mount_ids:
            for remote, sha in self.mounts.get(mid, []):
                dest = fs / remote.lstrip("/")
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(self.files[sha])
        for vm in fn.volume_mounts:
            store = self.root / "volumes" / vm.volume_id
            store.mkdir(parents=True, exist_ok=True)
            link = fs / vm.mount_path.lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                link.symlink_to(store, target_is_directory=True)
        if inp.data_format == api_pb2.DATA_FORMAT_CBOR:
            import cbor2

            args = cbor2.loads(inp.args)
        else:
            args = pickle.loads(inp.args)
        src, dst = call.root / f"input-{call.containers}.pkl", call.root / f"output-{call.containers}.pkl"
        src.write_bytes(pickle.dumps(tuple(args)))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MODAL_", "GPU_ROUTER_"))}
        call.proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, str(fs / "root"), fn.module_name, fn.function_name, str(src), str(dst)],
            cwd=fs / "root", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        threading.Thread(target=self._watch, args=(call, dst), daemon=True).start()

    def _watch(self, call: Call, dst: Path) -> None:
        proc = call.proc
        timeout = call.function.timeout_secs or 300
        timer = threading.Timer(timeout, self._timeout, args=(call,))
        timer.start()
        for raw in proc.stdout:
            call.logs.append((time.time(), raw.decode("utf-8", "replace")))
        proc.wait()
        timer.cancel()
        if call.status is not None or proc in call.preempted:  # a preempted container: it runs again
            return
        try:
            kind, value = pickle.loads(dst.read_bytes())
        except (OSError, EOFError, pickle.UnpicklingError):
            kind, value = "err", f"the container exited with status {proc.returncode}"
        if kind == "ok":
            call.result, call.status = pickle.dumps(value), GR.GENERIC_STATUS_SUCCESS
        else:
            call.exception, call.status = value, GR.GENERIC_STATUS_FAILURE

    def _timeout(self, call: Call) -> None:
        if call.status is None:
            call.status, call.exception = GR.GENERIC_STATUS_TIMEOUT, \
                f"Function timed out after {call.function.timeout_secs}s"
            if self.timeout_kill_after_s:
                threading.Timer(self.timeout_kill_after_s, self._kill, args=(call,)).start()
            else:
                self._kill(call)

    @staticmethod
    def _kill(call: Call, sig: int = signal.SIGKILL) -> None:
        """`sig` to every process of the call's session (the launcher leads a group of its own
        inside it), as Modal stopping the container would (SIGKILL)."""
        if call.proc is None:
            return
        sid = call.proc.pid
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == sid:
                        os.kill(int(entry), sig)
                except (ProcessLookupError, PermissionError):
                    pass
