# ExUnit tests of the Elixir wrapper (run: elixir -pa <build>/bindings/erlang/ebin this_file).
ExUnit.start()

defmodule GpuActorTest do
  use ExUnit.Case, async: false

  setup do
    {:ok, a} = GpuActor.start(device: System.get_env("GPA_DEVICE", "cpu"), threads: 2)
    on_exit(fn -> GpuActor.stop(a) end)
    {:ok, actor: a, q: GpuActor.queue(a)}
  end

  test "a training step: linear, cross-entropy, backward, sgd; deferred loss readback", %{actor: a, q: q} do
    x = GpuActor.tensor!(a, :f32, [4, 3])
    w = GpuActor.tensor!(a, :f32, [2, 3])
    b = GpuActor.tensor!(a, :f32, [2])
    [z, dz] = for _ <- 1..2, do: GpuActor.tensor!(a, :f32, [4, 2])
    tgt = GpuActor.tensor!(a, :i32, [4])
    loss = GpuActor.tensor!(a, :f32, [])
    [dx, dw, db, mw, mb] =
      for s <- [[4, 3], [2, 3], [2], [2, 3], [2]], do: GpuActor.tensor!(a, :f32, s)

    GpuActor.upload!(q, x, GpuActor.f32([1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1]))
    GpuActor.upload!(q, w, GpuActor.f32(List.duplicate(0, 6)))
    for t <- [b, mw, mb], do: GpuActor.submit!(q, "fill", [], [t], value: 0.0)
    GpuActor.upload!(q, tgt, GpuActor.i32([0, 1, 0, 1]))

    losses =
      for step <- 1..20 do
        {rb, stats} =
          GpuActor.batch!(q, "step", fn ->
            GpuActor.submit!(q, "linear_fwd", [x, w, b], [z])
            GpuActor.submit!(q, "cross_entropy_fwd", [z, tgt], [loss])
            GpuActor.submit!(q, "cross_entropy_bwd", [z, tgt], [dz])
            GpuActor.submit!(q, "linear_bwd", [dz, x, w], [dx, dw, db])
            GpuActor.submit!(q, "sgd", [w, dw, mw], [w, mw], lr: 0.5, momentum: 0.9)
            GpuActor.submit!(q, "sgd", [b, db, mb], [b, mb], lr: 0.5, momentum: 0.9)
            GpuActor.readback!(q, loss)
          end)

        assert stats.label == "step" and stats.errors == 0
        assert step == 1 or stats.ops == 7
        [l] = GpuActor.to_f32(GpuActor.data!(rb))
        l
      end

    assert_in_delta hd(losses), :math.log(2), 1.0e-6
    assert List.last(losses) < 0.5 * hd(losses)
  end

  test "errors: tuples and GpuActor.Error", %{actor: a, q: q} do
    x = GpuActor.tensor!(a, :f32, [4])
    y = GpuActor.tensor!(a, :f32, [5])
    assert {:error, {:eshape, msg}} = GpuActor.submit(q, :add, [x, x], [y])
    assert msg =~ "add"
    err = assert_raise GpuActor.Error, fn -> GpuActor.submit!(q, "no_such_op", [], []) end
    assert err.status == :enotfound
    # error:{badarg, Reason} from the NIF reaches Elixir as an ArgumentError naming the reason
    assert_raise ArgumentError, ~r/tensor_not_a_4_tuple/, fn -> GpuActor.submit(q, "noop", [:oops], []) end
  end

  test "feed: outfeed items arrive as messages with the session's tag", %{actor: a, q: q} do
    {:ok, f} = GpuActor.feed_open(a, {:run, 1})
    id = GpuActor.feed_id(f)
    x = GpuActor.tensor!(a, :f32, [2])
    :ok = GpuActor.push(f, [{:f32, [2], GpuActor.f32([3, 4])}])
    {:ok, _} = GpuActor.infeed(q, f, [x], 1000)
    {:ok, h} = GpuActor.outfeed(q, f, [x])
    assert_receive {:gpuactor_outfeed, ^id, {:run, 1}, [{:f32, [2], bin}]}, 5000
    assert GpuActor.to_f32(bin) == [3.0, 4.0]
    assert :ok == GpuActor.await(h, 1000)
    assert :ok == GpuActor.feed_close(f)
  end

  test "read! and views", %{actor: a, q: q} do
    t = GpuActor.tensor!(a, :f32, [2, 2])
    GpuActor.submit!(q, "fill", [], [t], value: 1.5)
    assert GpuActor.to_f32(GpuActor.read!(q, GpuActor.view(t, :f32, [2], 8))) == [1.5, 1.5]
    assert GpuActor.backend(a) in [:cpu, :sim, :cuda]
  end
end
