//! `resilience::tower::GrpcLayer` below a real tonic channel, against a real
//! tonic server over HTTP/2, directly and through the fault-injecting
//! proxy: what reached the server, what it applied, what the caller got.
//!
//! The client calls as generated code does (`tonic::client::Grpc::unary`
//! with prost messages); the messages are derived by hand, so no `protoc`
//! is needed.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use resilience::breaker::{BreakerConfig, CircuitBreaker, State as BreakerState};
use resilience::retry::Hedge;
use resilience::tower::{GrpcResilient, ResilienceLayer};
use resilience::{Error, Policy};
use resilience_chaos::{Proxy, Toxic, Toxics};
use tonic::codegen::{BoxFuture, Context, Poll, Service};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower::Layer;

#[derive(Clone, PartialEq, prost::Message)]
struct GetUser {
    #[prost(uint64, tag = "1")]
    id: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
struct CreateUser {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct User {
    #[prost(uint64, tag = "1")]
    id: u64,
    #[prost(string, tag = "2")]
    name: String,
}

const GET: &str = "/users.Users/GetUser";
const CREATE: &str = "/users.Users/CreateUser";

/// The server's side: scripted failures, then answers; what it applied.
#[derive(Default)]
struct Backend {
    get_calls: AtomicU32,
    get_script: Mutex<VecDeque<Code>>,
    /// How long each `GetUser` call hangs before answering, in turn.
    get_hangs: Mutex<VecDeque<Duration>>,
    create_calls: AtomicU32,
    create_script: Mutex<VecDeque<Code>>,
    created: Mutex<Vec<String>>,
}

fn scripted(script: &Mutex<VecDeque<Code>>) -> Option<Status> {
    let code = script.lock().unwrap().pop_front()?;
    Some(Status::new(code, format!("scripted {code:?}")))
}

/// `users.Users`, written as tonic's generated server code is.
#[derive(Clone)]
struct Users(Arc<Backend>);

impl tonic::server::NamedService for Users {
    const NAME: &'static str = "users.Users";
}

struct GetSvc(Arc<Backend>);

impl tonic::server::UnaryService<GetUser> for GetSvc {
    type Response = User;
    type Future = BoxFuture<tonic::Response<User>, Status>;

    fn call(&mut self, request: tonic::Request<GetUser>) -> Self::Future {
        let backend = Arc::clone(&self.0);
        Box::pin(async move {
            backend.get_calls.fetch_add(1, Ordering::SeqCst);
            let hang = backend.get_hangs.lock().unwrap().pop_front();
            if let Some(hang) = hang {
                tokio::time::sleep(hang).await;
            }
            if let Some(status) = scripted(&backend.get_script) {
                return Err(status);
            }
            let id = request.into_inner().id;
            Ok(tonic::Response::new(User {
                id,
                name: format!("user-{id}"),
            }))
        })
    }
}

struct CreateSvc(Arc<Backend>);

impl tonic::server::UnaryService<CreateUser> for CreateSvc {
    type Response = User;
    type Future = BoxFuture<tonic::Response<User>, Status>;

    fn call(&mut self, request: tonic::Request<CreateUser>) -> Self::Future {
        let backend = Arc::clone(&self.0);
        Box::pin(async move {
            backend.create_calls.fetch_add(1, Ordering::SeqCst);
            if let Some(status) = scripted(&backend.create_script) {
                return Err(status);
            }
            let name = request.into_inner().name;
            let mut created = backend.created.lock().unwrap();
            created.push(name.clone());
            Ok(tonic::Response::new(User {
                id: created.len() as u64,
                name,
            }))
        })
    }
}

impl Service<http::Request<tonic::body::Body>> for Users {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let backend = Arc::clone(&self.0);
        Box::pin(async move {
            Ok(match request.uri().path() {
                GET => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.unary(GetSvc(backend), request).await
                }
                CREATE => {
                    let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::default());
                    grpc.unary(CreateSvc(backend), request).await
                }
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

async fn serve(backend: Arc<Backend>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(Users(backend))
            .serve_with_incoming(incoming),
    );
    addr
}

/// Retries 10 ms apart, at most 3 attempts within 300 ms; a breaker that
/// judges after 2 calls.
fn client(addr: SocketAddr, name: &'static str) -> (GrpcResilient<Channel>, CircuitBreaker) {
    client_with(addr, name, None)
}

fn client_with(
    addr: SocketAddr,
    name: &'static str,
    hedge: Option<Hedge>,
) -> (GrpcResilient<Channel>, CircuitBreaker) {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    let policy = Policy::builder()
        .with_initial(Duration::from_millis(10))
        .with_max_elapsed(Duration::from_millis(300))
        .build()
        .unwrap();
    let breaker = CircuitBreaker::new(
        name,
        BreakerConfig::new()
            .with_min_requests(2)
            .with_cooldown(Duration::from_secs(60)),
    )
    .unwrap();
    let mut layer = ResilienceLayer::new(name, policy).with_breaker(breaker.clone());
    if let Some(hedge) = hedge {
        layer = layer.with_hedge(hedge);
    }
    let layer = layer.grpc().idempotent([GET]).unwrap();
    (layer.layer(channel), breaker)
}

async fn get_user(channel: &GrpcResilient<Channel>, id: u64) -> Result<User, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|err| Status::unknown(err.to_string()))?;
    let path = http::uri::PathAndQuery::from_static(GET);
    let request = tonic::Request::new(GetUser { id });
    let codec = tonic_prost::ProstCodec::default();
    Ok(grpc.unary(request, path, codec).await?.into_inner())
}

async fn create_user(channel: &GrpcResilient<Channel>, name: &str) -> Result<User, Status> {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready()
        .await
        .map_err(|err| Status::unknown(err.to_string()))?;
    let path = http::uri::PathAndQuery::from_static(CREATE);
    let request = tonic::Request::new(CreateUser { name: name.into() });
    let codec = tonic_prost::ProstCodec::default();
    Ok(grpc.unary(request, path, codec).await?.into_inner())
}

#[tokio::test]
async fn an_idempotent_method_is_retried_on_unavailable_and_answers() {
    let backend = Arc::new(Backend::default());
    backend
        .get_script
        .lock()
        .unwrap()
        .extend([Code::Unavailable, Code::Unavailable]);
    let (channel, breaker) = client(serve(Arc::clone(&backend)).await, "grpc-retried");

    let user = get_user(&channel, 7).await.unwrap();
    assert_eq!((user.id, user.name.as_str()), (7, "user-7"));
    // Two failed attempts and the answer reached the server: one call.
    assert_eq!(backend.get_calls.load(Ordering::SeqCst), 3);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

#[tokio::test]
async fn a_method_not_declared_idempotent_is_sent_once_and_its_status_reaches_the_caller() {
    let backend = Arc::new(Backend::default());
    backend
        .create_script
        .lock()
        .unwrap()
        .push_back(Code::Unavailable);
    let (channel, _) = client(serve(Arc::clone(&backend)).await, "grpc-once");

    let status = create_user(&channel, "ada").await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "scripted Unavailable");
    assert_eq!(backend.create_calls.load(Ordering::SeqCst), 1);
    // The next call goes through: nothing was applied twice.
    assert_eq!(create_user(&channel, "ada").await.unwrap().id, 1);
    assert_eq!(*backend.created.lock().unwrap(), ["ada"]);
}

#[tokio::test]
async fn a_business_error_is_an_answer_and_internal_errors_open_the_breaker() {
    let backend = Arc::new(Backend::default());
    backend
        .get_script
        .lock()
        .unwrap()
        .extend([Code::NotFound, Code::NotFound]);
    let (channel, breaker) = client(serve(Arc::clone(&backend)).await, "grpc-breaker");

    // NOT_FOUND: not retried, a success for the breaker.
    for _ in 0..2 {
        let status = get_user(&channel, 404).await.unwrap_err();
        assert_eq!(status.code(), Code::NotFound);
    }
    assert_eq!(backend.get_calls.load(Ordering::SeqCst), 2);
    assert_eq!(breaker.state(), BreakerState::Closed);

    // INTERNAL: not retried, a failure: 2 of the last 4 calls failed.
    backend
        .create_script
        .lock()
        .unwrap()
        .extend([Code::Internal, Code::Internal]);
    for _ in 0..2 {
        let status = create_user(&channel, "bob").await.unwrap_err();
        assert_eq!(status.code(), Code::Internal);
    }
    assert_eq!(breaker.state(), BreakerState::Open);

    // Open: refused before the network, as UNAVAILABLE naming the breaker.
    let status = get_user(&channel, 1).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(status.message().contains("grpc-breaker"), "{status:?}");
    let source = std::error::Error::source(&status).expect("the runtime's error");
    assert!(
        source
            .downcast_ref::<Error>()
            .is_some_and(|err| matches!(err, Error::DependencyDown(_))),
        "{source:?}"
    );
    assert_eq!(backend.get_calls.load(Ordering::SeqCst), 2);
    assert_eq!(backend.create_calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn connections_reset_before_the_server_are_retried_and_nothing_is_applied_twice() {
    let backend = Arc::new(Backend::default());
    let upstream = serve(Arc::clone(&backend)).await;
    let proxy = Proxy::builder(upstream)
        .seed(7)
        .toxic(Toxic::ResetBeforeForward, 1.0)
        .start()
        .await
        .unwrap();
    let (channel, _) = client(proxy.addr(), "grpc-reset");

    // Every connection is reset before a byte reaches the server: the
    // idempotent call spends its attempts, none of which arrives.
    let status = get_user(&channel, 3).await.unwrap_err();
    assert_ne!(status.code(), Code::Ok);
    assert_eq!(backend.get_calls.load(Ordering::SeqCst), 0);
    assert!(
        proxy.connections() >= 2,
        "{} connections",
        proxy.connections()
    );

    // The network heals: the next call is answered, once.
    proxy.heal();
    assert_eq!(get_user(&channel, 3).await.unwrap().id, 3);
    assert_eq!(backend.get_calls.load(Ordering::SeqCst), 1);

    // A create whose response is lost after the server applied it is not
    // sent again: the caller gets an error, the server holds one user. The
    // fault is armed by the message's own bytes (field 1, "eve"), on a new
    // connection (toxics apply to the connections accepted after them).
    proxy
        .set(Toxics::new().toxic(
            Toxic::ResetAfterResponseTo {
                request: b"\x0a\x03eve",
                quiet: Duration::from_millis(100),
            },
            1.0,
        ))
        .unwrap();
    let (fresh, _) = client(proxy.addr(), "grpc-lost");
    let status = create_user(&fresh, "eve").await.unwrap_err();
    assert_ne!(status.code(), Code::Ok);
    assert_eq!(backend.create_calls.load(Ordering::SeqCst), 1);
    assert_eq!(*backend.created.lock().unwrap(), ["eve"]);
}

#[tokio::test]
async fn a_hung_server_is_cut_at_max_elapsed_and_the_caller_gets_deadline_exceeded() {
    let backend = Arc::new(Backend::default());
    backend
        .get_hangs
        .lock()
        .unwrap()
        .push_back(Duration::from_secs(10));
    let (channel, breaker) = client(serve(Arc::clone(&backend)).await, "grpc-hung");

    let started = std::time::Instant::now();
    let status = get_user(&channel, 9).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status:?}");
    let source = std::error::Error::source(&status).expect("the runtime's error");
    assert!(
        source
            .downcast_ref::<Error>()
            .is_some_and(|err| matches!(err, Error::MaxElapsedExceeded { attempts: 1, .. })),
        "{source:?}"
    );
    // Cut at the chain's 300 ms, not the server's 10 s; one request sent.
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(backend.get_calls.load(Ordering::SeqCst), 1);
    // A hung call is a failure for the breaker.
    let snapshot = breaker.snapshot();
    assert_eq!((snapshot.calls, snapshot.failures), (1, 1));
}

#[tokio::test]
async fn a_hedged_idempotent_method_is_answered_by_the_second_copy() {
    let backend = Arc::new(Backend::default());
    // The first call hangs for 10 s, longer than the chain's 300 ms; the
    // hedge sent after 50 ms answers at once.
    backend
        .get_hangs
        .lock()
        .unwrap()
        .push_back(Duration::from_secs(10));
    let hedge = Hedge::new("grpc-hedged", Duration::from_millis(50), 2).unwrap();
    let addr = serve(Arc::clone(&backend)).await;
    let (channel, _) = client_with(addr, "grpc-hedged", Some(hedge));

    let started = std::time::Instant::now();
    let user = get_user(&channel, 5).await.unwrap();
    assert_eq!(user.id, 5);
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(backend.get_calls.load(Ordering::SeqCst), 2);

    // A method not declared idempotent is neither retried nor hedged.
    backend
        .create_script
        .lock()
        .unwrap()
        .push_back(Code::Unavailable);
    assert_eq!(
        create_user(&channel, "kay").await.unwrap_err().code(),
        Code::Unavailable
    );
    assert_eq!(backend.create_calls.load(Ordering::SeqCst), 1);
}
