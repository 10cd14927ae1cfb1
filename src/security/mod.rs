//! Security, sans-IO: Kafka's listeners and security protocols, the per-connection
//! `Session` (listener, principal, authentication state), the SASL mechanisms (`sasl`: PLAIN,
//! SCRAM, sans-IO state machines), ACLs and the authorizer's decision (`acl`) and the parsing that the TLS and SASL layers above build on. Nothing here touches a socket or the executor: the server
//! layer owns the connections and hands these types around.
pub mod acl;
pub mod listener;
pub mod principal;
pub mod quota;
pub mod sasl;
pub mod session;
pub mod tls;
pub mod tls_reload;

pub use listener::{Endpoint, ListenerError, ListenerSettings, Listeners, SecurityProtocol};
pub use principal::{PrincipalError, PrincipalMapper};
pub use session::{Authentication, KafkaPrincipal, Session};
