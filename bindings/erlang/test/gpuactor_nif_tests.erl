%% EUnit tests of the NIF: ops, batches and deferred readbacks, errors as
%% tuples, bad terms as badarg with a reason, feed sessions delivering to
%% the session's process, dirty-scheduler waits, resources outliving
%% their actor.
-module(gpuactor_nif_tests).
-include_lib("eunit/include/eunit.hrl").

-define(N, gpuactor_nif).

f32(L) -> << <<X:32/float-little>> || X <- L >>.
to_f32(B) -> [X || <<X:32/float-little>> <= B].

actor() ->
    Dev = case os:getenv("GPA_DEVICE") of false -> <<"cpu">>; D -> list_to_binary(D) end,
    {ok, A} = ?N:actor_create([{device, Dev}, {threads, 2}]),
    A.

tensor(A, Dtype, Shape) ->
    Bytes = max(1, lists:foldl(fun erlang:'*'/2, 1, Shape)) * 4,
    {ok, B} = ?N:buffer_acquire(A, undefined, Bytes),
    {B, 0, Dtype, Shape}.

op_and_readback_test() ->
    A = actor(),
    {ok, Q} = ?N:default_queue(A),
    X = tensor(A, f32, [2, 3]), Y = tensor(A, f32, [2, 3]),
    ok = ?N:batch_begin(Q, <<"step">>),
    {ok, _} = ?N:upload(Q, X, f32([1, 2, 3, 4, 5, 6]), 0),
    {ok, H} = ?N:submit(Q, <<"scale">>, [X], [Y], [{alpha, 0.5}]),
    {ok, R} = ?N:readback(Q, Y),
    ?assertMatch({error, {enotsynced, _}}, ?N:handle_data(R)),
    {ok, Stats} = ?N:sync_batch(Q),
    ?assertEqual(<<"step">>, maps:get(label, Stats)),
    ?assert(maps:get(ops, Stats) >= 3),
    ?assertEqual(ok, ?N:handle_status(H)),
    {ok, Bin} = ?N:handle_data(R),
    ?assertEqual([0.5, 1.0, 1.5, 2.0, 2.5, 3.0], to_f32(Bin)),
    ok = ?N:actor_destroy(A).

errors_are_tuples_test() ->
    A = actor(),
    {ok, Q} = ?N:default_queue(A),
    X = tensor(A, f32, [4]), Y = tensor(A, f32, [5]),
    ?assertMatch({error, {eshape, <<"add", _/binary>>}}, ?N:submit(Q, <<"add">>, [X, X], [Y], [])),
    ?assertMatch({error, {enotfound, _}}, ?N:submit(Q, <<"nope">>, [X], [Y], [])),
    ?assertMatch({error, {einval, _}}, ?N:submit(Q, <<"scale">>, [X], [X], [{bogus, 1}])),
    ?assertMatch({error, {einval, _}}, ?N:actor_create([{device, <<"tpu">>}])),
    %% an error found when the op runs: on the handle and on the batch
    {ok, T} = ?N:buffer_acquire(A, undefined, 32),
    {ok, Ids} = ?N:buffer_acquire(A, undefined, 8),
    Table = {T, 0, f32, [4, 2]}, IdT = {Ids, 0, i32, [1, 2]}, Out = tensor(A, f32, [1, 2, 2]),
    ok = ?N:batch_begin(Q, <<"bad">>),
    {ok, _} = ?N:upload(Q, IdT, <<0:32/little, 9:32/little>>, 0),
    {ok, H} = ?N:submit(Q, <<"embedding_fwd">>, [IdT, Table], [Out], []),
    ?assertMatch({error, {erange, _}, #{errors := 1}}, ?N:sync_batch(Q)),
    ?assertMatch({error, {erange, <<"embedding_fwd: ids[0,1]", _/binary>>}}, ?N:await(H, 1000)),
    ok = ?N:actor_destroy(A).

bad_terms_are_badarg_test() ->
    A = actor(),
    {ok, Q} = ?N:default_queue(A),
    X = tensor(A, f32, [4]),
    ?assertError({badarg, not_a_queue}, ?N:submit(A, <<"noop">>, [], [], [])),
    ?assertError({badarg, tensor_not_a_4_tuple}, ?N:submit(Q, <<"noop">>, [foo], [], [])),
    ?assertError({badarg, tensor_dtype}, ?N:submit(Q, <<"noop">>, [setelement(3, X, f99)], [], [])),
    ?assertError({badarg, tensor_shape}, ?N:submit(Q, <<"noop">>, [setelement(4, X, [-1])], [], [])),
    ?assertError({badarg, attr_value}, ?N:submit(Q, <<"scale">>, [X], [X], [{alpha, "x"}])),
    ?assertError({badarg, tensors_not_a_list}, ?N:submit(Q, <<"noop">>, x, [], [])),
    ?assertError({badarg, not_a_feed}, ?N:infeed(Q, make_ref(), [], 5)),
    {ok, F} = ?N:feed_open(A, t, self(), []),
    ?assertError({badarg, timeout}, ?N:infeed(Q, F, [X], -5)),
    ?assertError({badarg, pid}, ?N:feed_open(A, t, not_a_pid, [])),
    ?assertError({badarg, host_tensor_not_a_3_tuple}, ?N:infeed_push(F, [{f32, [1]}])),
    ?assertError({badarg, data_not_a_binary}, ?N:upload(Q, X, [1, 2], 0)),
    ?assertError({badarg, label}, ?N:buffer_acquire(A, 42, 8)),
    ?assertError({badarg, unknown_option}, ?N:actor_create([{colour, blue}])),
    B = element(1, X),
    {ok, A2} = ?N:actor_create([{device, <<"cpu">>}, {threads, 1}]),
    {ok, Q2} = ?N:default_queue(A2),
    ?assertError({badarg, tensor_buffer_of_another_actor}, ?N:readback(Q2, {B, 0, f32, [4]})),
    ok = ?N:actor_destroy(A2),
    ok = ?N:actor_destroy(A).

feed_sends_to_the_session_process_test() ->
    A = actor(),
    {ok, Q} = ?N:default_queue(A),
    Self = self(),
    X = tensor(A, f32, [3]), Y = tensor(A, f32, [3]),
    %% the session belongs to another process: items go there, not here
    Collector = spawn_link(fun() -> collect(Self, []) end),
    {ok, F} = ?N:feed_open(A, {trainer, 7}, Collector, [{outfeed_capacity, 4}]),
    Id = ?N:feed_id(F),
    ok = ?N:infeed_push(F, [{f32, [3], f32([1, 2, 3])}]),
    {ok, _} = ?N:infeed(Q, F, [X], 1000),
    {ok, _} = ?N:submit(Q, <<"scale">>, [X], [Y], [{alpha, 2.0}]),
    {ok, H1} = ?N:outfeed(Q, F, [Y]),
    {ok, H2} = ?N:outfeed(Q, F, [X, Y]),
    ok = ?N:await(H1, 5000), ok = ?N:await(H2, 5000),
    Collector ! {done, Self},
    Got = receive {collected, L} -> L after 5000 -> timeout end,
    ?assertMatch([{gpuactor_outfeed, Id, {trainer, 7}, [{f32, [3], _}]},
                  {gpuactor_outfeed, Id, {trainer, 7}, [{f32, [3], _}, {f32, [3], _}]}], Got),
    [{_, _, _, [{_, _, B1}]}, {_, _, _, [{_, _, B2}, _]}] = Got,
    ?assertEqual([2.0, 4.0, 6.0], to_f32(B1)),
    ?assertEqual([1.0, 2.0, 3.0], to_f32(B2)),
    receive {gpuactor_outfeed, _, _, _} -> ?assert(false) after 0 -> ok end,
    ?assertMatch({error, {eshape, _}}, ?N:infeed_push(F, [{f32, [3], <<1, 2>>}])),
    ok = ?N:feed_close(F),
    ?assertMatch({error, {eclosed, _}}, ?N:infeed_push(F, [{f32, [3], f32([1, 2, 3])}])),
    ok = ?N:actor_destroy(A).

collect(Parent, Acc) ->
    receive
        {gpuactor_outfeed, _, _, _} = M -> collect(Parent, [M | Acc]);
        {done, P} -> P ! {collected, lists:reverse(Acc)}
    end.

%% A queue parked on an empty infeed: sync waits on a dirty scheduler, so
%% this process keeps running (the test command starts erl with +S 1: one
%% normal scheduler, which a blocking NIF would take); a timeout fails it.
dirty_waits_do_not_block_schedulers_test() ->
    A = actor(),
    {ok, Q} = ?N:queue_create(A, <<"parked">>),
    {ok, F} = ?N:feed_open(A, t, self(), []),
    X = tensor(A, f32, [1]),
    Self = self(),
    ok = ?N:batch_begin(Q, <<"wait">>),
    {ok, H} = ?N:infeed(Q, F, [X], 5000),
    spawn_link(fun() -> Self ! {synced, ?N:sync_batch(Q)} end),
    ?assertEqual({error, {etimedout, <<"await timed out">>}}, ?N:await(H, 50)),
    Ticks = spin(erlang:monotonic_time(millisecond) + 100, 0),
    ?assert(Ticks > 1000),
    ok = ?N:infeed_push(F, [{f32, [1], f32([4.0])}]),
    ?assertMatch({synced, {ok, #{errors := 0}}}, receive S -> S after 5000 -> timeout end),
    ok = ?N:await(H, 1000),
    {ok, H2} = ?N:infeed(Q, F, [X], 10),
    ?assertMatch({error, {etimedout, _}}, ?N:await(H2, 5000)),
    ok = ?N:queue_destroy(Q),
    ok = ?N:actor_destroy(A).

spin(End, N) ->
    case erlang:monotonic_time(millisecond) >= End of
        true -> N;
        false -> spin(End, N + 1)
    end.

%% Resources outlive the actor: after destroy, calls answer eshutdown and
%% the destructors (run by the GC) do not touch the freed actor.
resources_after_destroy_test() ->
    A = actor(),
    {ok, Q} = ?N:default_queue(A),
    X = tensor(A, f32, [2]),
    {ok, F} = ?N:feed_open(A, t, self(), []),
    {ok, H} = ?N:readback(Q, X),
    ok = ?N:await(H, 5000),
    ok = ?N:actor_destroy(A),
    ok = ?N:actor_destroy(A),
    ?assertMatch({error, {eshutdown, _}}, ?N:submit(Q, <<"noop">>, [], [], [])),
    ?assertMatch({error, {eshutdown, _}}, ?N:buffer_release(element(1, X))),
    ?assertMatch({error, {eshutdown, _}}, ?N:buffer_acquire(A, undefined, 8)),
    ok = ?N:feed_close(F), % closed by the destroy already: nothing left to do
    ?assertMatch({error, {eclosed, _}}, ?N:feed_close(F)),
    {ok, Bin} = ?N:handle_data(H),
    ?assertEqual(8, byte_size(Bin)),
    erlang:garbage_collect(),
    %% many short-lived actors and buffers collected by the GC alone
    [begin
         {ok, A1} = ?N:actor_create([{device, <<"cpu">>}, {threads, 1}]),
         {ok, _} = ?N:buffer_acquire(A1, <<"lbl">>, 64),
         {ok, _} = ?N:default_queue(A1)
     end || _ <- lists:seq(1, 5)],
    erlang:garbage_collect(),
    ok.

%% A buffer whose last reference dies with its process is released by the
%% GC (through the NIF's reaper thread): its label becomes free again.
gc_releases_buffers_test() ->
    A = actor(),
    Self = self(),
    P = spawn(fun() -> {ok, _B} = ?N:buffer_acquire(A, <<"gc.lbl">>, 64), Self ! held,
                       receive stop -> ok end end),
    receive held -> ok after 5000 -> error(not_held) end,
    ?assertMatch({error, {emismatch, _}}, ?N:buffer_acquire(A, <<"gc.lbl">>, 128)),
    exit(P, kill),
    ?assert(wait_until(fun() -> not is_live(A) end)),
    {ok, B2} = ?N:buffer_acquire(A, <<"gc.lbl">>, 128),
    ok = ?N:buffer_release(B2),
    ok = ?N:actor_destroy(A).

is_live(A) ->
    case ?N:buffer_acquire(A, <<"gc.lbl">>, 128) of
        {error, {emismatch, _}} -> true;
        {ok, B} -> ok = ?N:buffer_release(B), false
    end.

wait_until(F) -> wait_until(F, 200).
wait_until(_, 0) -> false;
wait_until(F, K) ->
    erlang:garbage_collect(),
    case F() of true -> true; false -> timer:sleep(10), wait_until(F, K - 1) end.
