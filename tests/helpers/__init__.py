"""What tests share that is not a fixture: data factories (factories.py: Promptriever rows, validated
seeds, fixture dual views, file writers; samples.py: the bundled sample with hand-written dual views),
the controlled world and its reference engine (world.py, reference_engine.py: plugged in as
`engine: plugin`, never imported by the project), the plain synthesis rules the scalable ones are
compared with (synthesis_reference.py), starters and readers of local services
(services.py: ports, waits, endpoints, killing a session, moto's throwaway credentials;
prefect_server.py, mlflow_auth.py, ray_cluster.py), readers of infra/ and docker/ (infra.py), and the
published-weights check (published_weights.py). Test modules import from here only, never from
another test module or a conftest; fixtures stay in the conftest.py files."""
