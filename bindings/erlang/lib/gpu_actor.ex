defmodule GpuActor do
  @moduledoc """
  Elixir wrapper over `:gpuactor_nif` (the gpuactor C API as NIFs).

      {:ok, a} = GpuActor.start(device: "cpu")
      q = GpuActor.queue(a)
      x = GpuActor.tensor!(a, :f32, [2, 3])
      y = GpuActor.tensor!(a, :f32, [2, 3])
      {rb, _stats} =
        GpuActor.batch!(q, "step", fn ->
          GpuActor.upload!(q, x, GpuActor.f32([1, 2, 3, 4, 5, 6]))
          GpuActor.submit!(q, "scale", [x], [y], alpha: 2.0)
          GpuActor.readback!(q, y)
        end)
      GpuActor.to_f32(GpuActor.data!(rb))   # deferred readback, read after the sync

  Functions return `{:ok, v}` / `{:error, {status, message}}`; the `!`
  forms raise `GpuActor.Error`. Bad terms raise `ArgumentError`-like
  `{:badarg, reason}` errors from the NIF. Outfeed items arrive at the
  session's process as `{:gpuactor_outfeed, feed_id, user_tag, [{dtype, shape, binary}]}`.
  """

  # :gpuactor_nif is compiled separately (src/gpuactor_nif.erl)
  @compile {:no_warn_undefined, :gpuactor_nif}

  defmodule Error do
    defexception [:status, :message]
  end

  @type tensor :: {reference(), non_neg_integer(), atom(), [non_neg_integer()]}

  @dtype_bytes %{f32: 4, f16: 2, bf16: 2, i32: 4, u8: 1, i64: 8}

  defp unwrap({:ok, v}), do: v
  defp unwrap(:ok), do: :ok
  defp unwrap({:error, {status, msg}}), do: raise(Error, status: status, message: "#{status}: #{msg}")
  defp unwrap({:error, {status, msg}, _stats}), do: raise(Error, status: status, message: "#{status}: #{msg}")

  def version, do: :gpuactor_nif.version()

  @doc "Creates an actor. Options: device (\"cpu\", \"sim\", \"cuda\", \"auto\"), threads, mailbox_size."
  def start(opts \\ []) do
    opts = Enum.map(opts, fn {:device, d} when is_binary(d) -> {:device, d}; kv -> kv end)
    :gpuactor_nif.actor_create(opts)
  end

  def start!(opts \\ []), do: unwrap(start(opts))
  def stop(actor), do: :gpuactor_nif.actor_destroy(actor)
  def backend(actor), do: :gpuactor_nif.actor_backend(actor)
  def queue(actor), do: unwrap(:gpuactor_nif.default_queue(actor))
  def new_queue(actor, name \\ ""), do: :gpuactor_nif.queue_create(actor, name)
  def destroy_queue(q), do: :gpuactor_nif.queue_destroy(q)

  def buffer(actor, bytes, label \\ :undefined), do: :gpuactor_nif.buffer_acquire(actor, label, bytes)
  def release(buffer), do: :gpuactor_nif.buffer_release(buffer)

  @doc "A tensor in a buffer of its own."
  def tensor(actor, dtype, shape, label \\ :undefined) do
    bytes = max(1, Enum.product(shape)) * Map.fetch!(@dtype_bytes, dtype)
    with {:ok, buf} <- buffer(actor, bytes, label), do: {:ok, {buf, 0, dtype, shape}}
  end

  def tensor!(actor, dtype, shape, label \\ :undefined), do: unwrap(tensor(actor, dtype, shape, label))

  @doc "The same bytes seen with another dtype/shape/offset."
  def view({buf, off, _dt, _sh}, dtype, shape, offset \\ 0), do: {buf, off + offset, dtype, shape}

  def submit(q, op, inputs, outputs, attrs \\ []),
    do: :gpuactor_nif.submit(q, to_string(op), inputs, outputs, Enum.to_list(attrs))

  def submit!(q, op, inputs, outputs, attrs \\ []), do: unwrap(submit(q, op, inputs, outputs, attrs))
  def upload(q, tensor, bin, version \\ 0), do: :gpuactor_nif.upload(q, tensor, bin, version)
  def upload!(q, tensor, bin, version \\ 0), do: unwrap(upload(q, tensor, bin, version))
  def readback(q, tensor), do: :gpuactor_nif.readback(q, tensor)
  def readback!(q, tensor), do: unwrap(readback(q, tensor))

  @doc "Waits for a handle on a dirty scheduler (timeout in ms or :infinity)."
  def await(h, timeout \\ :infinity), do: :gpuactor_nif.await(h, timeout)
  def status(h), do: :gpuactor_nif.handle_status(h)
  def data(h), do: :gpuactor_nif.handle_data(h)
  def data!(h), do: unwrap(data(h))

  @doc "Reads a tensor back and waits: its bytes."
  def read!(q, tensor) do
    h = readback!(q, tensor)
    unwrap(await(h))
    data!(h)
  end

  def batch_begin(q, label \\ ""), do: :gpuactor_nif.batch_begin(q, label)
  def sync(q), do: :gpuactor_nif.sync_batch(q)

  @doc "Runs fun between batch begin and sync: {fun's result, stats}; raises the batch's first error."
  def batch!(q, label, fun) do
    unwrap(batch_begin(q, label))
    result =
      try do
        fun.()
      rescue
        e ->
          sync(q)
          reraise e, __STACKTRACE__
      end

    {result, unwrap(sync(q))}
  end

  @doc "Opens a feed session whose outfeed items are sent to `pid` (default: the caller)."
  def feed_open(actor, user_tag, opts \\ []) do
    {pid, opts} = Keyword.pop(opts, :pid, self())
    :gpuactor_nif.feed_open(actor, user_tag, pid, opts)
  end

  def feed_close(feed), do: :gpuactor_nif.feed_close(feed)
  def feed_id(feed), do: :gpuactor_nif.feed_id(feed)
  def push(feed, host_tensors), do: :gpuactor_nif.infeed_push(feed, host_tensors)
  def infeed(q, feed, outputs, timeout \\ :infinity), do: :gpuactor_nif.infeed(q, feed, outputs, timeout)
  def outfeed(q, feed, inputs), do: :gpuactor_nif.outfeed(q, feed, inputs)

  @doc "Little-endian f32 binary of numbers, and back."
  def f32(list), do: for(x <- list, into: <<>>, do: <<x * 1.0::float-32-little>>)
  def to_f32(bin), do: for(<<x::float-32-little <- bin>>, do: x)
  def i32(list), do: for(x <- list, into: <<>>, do: <<x::signed-integer-32-little>>)
end
