"""What tests share that is not a fixture: data factories (factories.py: Promptriever rows, validated
seeds, fixture dual views, file writers; samples.py: the bundled sample with hand-written dual views;
st_folders.py: sentence-transformers model folders), starters and readers of local services
(services.py: ports, waits, endpoints, killing a session, moto's throwaway credentials;
prefect_server.py, mlflow_auth.py, ray_cluster.py), readers of infra/ and docker/ (infra.py), and the
published-weights check (published_weights.py). Test modules import from here only, never from
another test module or a conftest; fixtures stay in the conftest.py files."""
