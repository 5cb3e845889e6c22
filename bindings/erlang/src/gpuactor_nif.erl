%% gpuactor_nif: the gpuactor C API as NIFs (c_src/gpuactor_nif.c).
%%
%% Terms:
%%   Tensor      {Buffer, OffsetBytes, Dtype, Shape}   Dtype: f32 | f16 | bf16 | i32 | u8 | i64
%%   HostTensor  {Dtype, Shape, Binary}                 (infeed items, outfeed messages)
%%   Attrs       [{Name :: atom() | binary(), integer() | float()}]
%%   Errors      {error, {Status, Message}}: Status is the status name in
%%               lower case without GPA_ (einval, eshape, etimedout, ...).
%%   Bad terms   error:{badarg, Reason}.
%% Outfeed items arrive at the session's process as
%%   {gpuactor_outfeed, FeedId, UserTag, [HostTensor]}.
%% Blocking calls (await, sync_batch, create/destroy, buffer acquire/release,
%% queue_create, feed_open/close) run on dirty I/O schedulers; the others
%% only validate and enqueue. The NIF library is looked up at
%% $GPA_NIF (a path without .so), else ../priv/gpuactor_nif next to this
%% module's .beam.
-module(gpuactor_nif).
-export([actor_create/1, actor_destroy/1, actor_backend/1, default_queue/1, queue_create/2,
         queue_destroy/1, buffer_acquire/3, buffer_release/1, submit/5, upload/4, readback/2,
         await/2, handle_status/1, handle_data/1, batch_begin/2, sync_batch/1, feed_open/4,
         feed_close/1, feed_id/1, infeed_push/2, infeed/4, outfeed/3, status_name/1, version/0]).
-on_load(init/0).

init() ->
    Path = case os:getenv("GPA_NIF") of
               false ->
                   Dir = filename:dirname(code:which(?MODULE)),
                   filename:join([Dir, "..", "priv", "gpuactor_nif"]);
               P -> P
           end,
    erlang:load_nif(Path, 0).

-define(NIF, erlang:nif_error({nif_not_loaded, ?MODULE})).
actor_create(_Opts) -> ?NIF.
actor_destroy(_Actor) -> ?NIF.
actor_backend(_Actor) -> ?NIF.
default_queue(_Actor) -> ?NIF.
queue_create(_Actor, _Name) -> ?NIF.
queue_destroy(_Queue) -> ?NIF.
buffer_acquire(_Actor, _Label, _Size) -> ?NIF.
buffer_release(_Buffer) -> ?NIF.
submit(_Queue, _Op, _Inputs, _Outputs, _Attrs) -> ?NIF.
upload(_Queue, _Tensor, _Data, _Version) -> ?NIF.
readback(_Queue, _Tensor) -> ?NIF.
await(_Handle, _TimeoutMs) -> ?NIF.
handle_status(_Handle) -> ?NIF.
handle_data(_Handle) -> ?NIF.
batch_begin(_Queue, _Label) -> ?NIF.
sync_batch(_Queue) -> ?NIF.
feed_open(_Actor, _UserTag, _Pid, _Opts) -> ?NIF.
feed_close(_Feed) -> ?NIF.
feed_id(_Feed) -> ?NIF.
infeed_push(_Feed, _Item) -> ?NIF.
infeed(_Queue, _Feed, _Outputs, _TimeoutMs) -> ?NIF.
outfeed(_Queue, _Feed, _Inputs) -> ?NIF.
status_name(_Status) -> ?NIF.
version() -> ?NIF.
