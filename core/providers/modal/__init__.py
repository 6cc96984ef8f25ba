"""The `modal` target: GPUs on demand from the user's Modal account, through the official client.

    targets:
      md: {kind: modal, gpu: T4, internet: false, max_resumes: 3}

How a job travels (every call is the official `modal` package's public API, made in this
process with a client built from the keychain's token: `modal.Client.from_credentials`):

- each attempt is a detached Modal app `gr-<short id>-a<attempt>` with one function whose
  body is core/runtime/modal_function.py; its image is Debian slim with the project's
  requirements.txt / pyproject.toml dependencies pip-installed (Modal builds an image once
  per definition, so an unchanged dependency list reuses the built one), and the bundle's
  manifest with the file objects it names (core/packaging/objects.py), the runtime and each
  data set attached as mounted files: Modal uploads a file only when its content hash is new,
  so an unchanged re-submit sends no file and a one-file change sends that file (and the
  manifest); the function builds the code folder from them (core/runtime/codetree.py);
- the image is built from the request's `image` (a registry reference, `Image.from_registry`)
  instead of Debian slim where it names one, and the request's `packages` are pip-installed into
  it after the project's own dependencies;
- GPU type from the request (`gpu`, `vram_gb`; the router picks the cheapest fitting type from
  PRICES) and count (`gpus`, or `gpu: H100:4`: Modal gives 1 to GPU_COUNT_MAX of one type; the
  router prices the offer at the count, and the function asks Modal for `H100:4`), the function's timeout from the hours with a margin (Modal caps a function at 24 h:
  longer jobs are passed over at plan time, with the reason), outbound network blocked unless
  the target says `internet: true`;
- the job's folder (checkpoints, outputs, log, metrics) lives on a Modal Volume named for the
  job, so the attempt that follows a timeout reads the last checkpoint of the one before;
- status: the function call's result (`FunctionCall.get(timeout=0)`): not ready -> running,
  a result -> exited with the job's exit code, a timeout -> session_ended (resume), a
  cancellation -> cancelled; the log is the call's own log (`FunctionCall.logs.fetch`), which
  carries the launcher's already masked lines and, behind a marker, the metric rows;
- a preemption (Modal signals the container, waits its grace, kills it and runs the same input
  in a new one) is no session end here: the same call goes on from the newest complete checkpoint
  generation on the volume, and its result carries every container's log and metric rows
  (core/runtime/modal_function.py); a preempted container's own result, should one ever come
  back, is a session end (resume), never the job's exit;
- outputs come back inside the result as a gzipped tar, unpacked by the shared safe writer;
- checkpoints come home from the copy in each call's result, and from the volume itself when a
  call hands no result back (Modal stopped it at its timeout, it crashed, it was cancelled): its
  last complete checkpoint is read with the client's Volume API (`iterdir`, `read_file`), by
  ckptscan's completeness rule, names checked, within the caps and `volume_read_timeout_s`,
  files home already has copied from home; a failed read is logged and changes nothing.

Keychain secrets are not sent (takes_secrets is False): a Modal Secret would put their values
in the account's storage beyond the job's life. The token lives only in the keychain, under
`modal:<target name>`; it is read into this process's memory and handed to the client object,
never into an environment, a file or a command line.

The room: catalog.py (GPU types, prices, counts, timeouts: read at plan time), wire.py (the
client), image.py (the image and the launcher's spec), volume.py (what is read back from the
job's volume), target.py (an attempt's steps). The package is named for the service; inside
it `import modal` is always the official client (absolute imports).
"""
