"""The `kaggle` target: Kaggle's free weekly GPU hours, through Kaggle's official SDK.

    targets:
      kg: {kind: kaggle, accelerator: t4x2, internet: false, offline: auto, max_resumes: 3}

How a job travels (every call is one of Kaggle's public API calls, made with `kagglesdk`, the
SDK the official `kaggle` package is built on):

- the project's code goes up as file objects in a chain of private data sets, each named by the
  hash of what it holds: a base, then per later submit a small delta with only the objects the
  chain lacks (code.py); gpu-router's runtime is one more (`gr-rt-<hash>`);
  an unchanged re-submit finds them (GetDatasetStatus) and uploads nothing but the kernel;
  each local data set likewise, once per content hash;
- dependencies: without internet (Kaggle's default), the project's requirements are resolved
  here for Kaggle's image into a wheelhouse (deps.py), shipped once as a
  private data set named by its hash, and installed with `--no-index`; this happens in the
  job's provisioning step, before the first upload, so a package that cannot be shipped is
  named before anything goes up;
- each attempt is a private kernel `gr-<short id>-a<attempt>` whose code is
  core/runtime/kaggle_kernel.py with the attempt's spec in front; GPU on, the accelerator from
  the request or the target, internet off unless the target says so, and a session timeout
  from the job's hours (within Kaggle's session limit);
- status: QUEUED -> provisioning, RUNNING -> running, COMPLETE -> done (or resumed, when it
  stopped at the session limit after saving), ERROR -> failed with Kaggle's failure message,
  CANCEL_* -> cancelled; the kernel's log carries the job's (already masked) log and metrics;
- outputs are the session's output files under gpu-router/job/out/, downloaded with the same
  caps and unpacked by the same writer as every other target's;
- a session that reaches the time limit resumes in a new kernel that reads the previous
  one's output (its checkpoint folder), up to `max_resumes` times.

Credentials (an API token, or the username and key of kaggle.json) live only in the keychain,
under `kaggle:<target name>`; they are read into this process's memory, never into an
environment, a file or a command line.

The room: wire.py (the API calls), datasets.py (uploads), code.py (the chain of code data sets),
deps.py (the wheelhouse for Kaggle's image), target.py (an attempt's steps), outputs.py (what
comes home). Only core's lower layers are imported; the SDK only inside the calls that use it.
"""

