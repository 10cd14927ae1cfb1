//! The authorizer as requests meet it: one `Authz` per request, holding the connection's
//! principal and host and the ACL image current when the request arrived, so every check a
//! handler makes for that request sees the same bindings (a request never sees half of an
//! ACL change).
//!
//! With `authorizer` empty an `Authz` is empty and every check is one branch: nothing is
//! loaded, nothing allocated. With it on, a check is a few hash lookups in the image's index
//! (`security::acl`), never a scan of all bindings.
use std::rc::Rc;
use std::sync::Arc;

use crate::security::acl::{AclOperation, Acls, Authorizer, ResourceType, CLUSTER_NAME};
use crate::security::{KafkaPrincipal, Session};
use crate::shard::ShardCtx;

/// One request's authorization context; cheap to clone (a pointer) into deferred handlers.
#[derive(Clone, Default)]
pub struct Authz {
    inner: Option<Rc<Inner>>,
}

struct Inner {
    authorizer: Arc<Authorizer>,
    acls: Arc<Acls>,
    principal: KafkaPrincipal,
    host: String,
}

impl Authz {
    /// Authorization off: every check passes.
    pub fn off() -> Authz {
        Authz { inner: None }
    }

    /// The context of a request on `session`'s connection.
    pub fn for_session(ctx: &ShardCtx, session: &Session) -> Authz {
        let Some(authorizer) = &ctx.shared.authorizer else {
            return Authz::off();
        };
        let acls = ctx.shared.catalog.load().acls.clone();
        Authz::new(
            authorizer.clone(),
            acls,
            session.principal.clone(),
            session.host(),
        )
    }

    pub fn new(
        authorizer: Arc<Authorizer>,
        acls: Arc<Acls>,
        principal: KafkaPrincipal,
        host: &str,
    ) -> Authz {
        Authz {
            inner: Some(Rc::new(Inner {
                authorizer,
                acls,
                principal,
                host: host.to_string(),
            })),
        }
    }

    /// Is an authorizer configured?
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// May the request do `op` on the resource? Always, with authorization off.
    pub fn allows(&self, op: AclOperation, resource_type: ResourceType, name: &str) -> bool {
        match &self.inner {
            None => true,
            Some(i) => {
                i.authorizer
                    .authorize(&i.acls, &i.principal, &i.host, op, resource_type, name)
            }
        }
    }

    /// Kafka's `authorizeByResourceType`: `op` on some resource of the type.
    pub fn allows_some(&self, op: AclOperation, resource_type: ResourceType) -> bool {
        match &self.inner {
            None => true,
            Some(i) => {
                i.authorizer
                    .authorize_some(&i.acls, &i.principal, &i.host, op, resource_type)
            }
        }
    }

    pub fn allows_topic(&self, op: AclOperation, topic: &str) -> bool {
        self.allows(op, ResourceType::Topic, topic)
    }

    pub fn allows_group(&self, op: AclOperation, group: &str) -> bool {
        self.allows(op, ResourceType::Group, group)
    }

    pub fn allows_cluster(&self, op: AclOperation) -> bool {
        self.allows(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    pub fn allows_transactional_id(&self, op: AclOperation, id: &str) -> bool {
        self.allows(op, ResourceType::TransactionalId, id)
    }

    /// Kafka's `authorized_operations` bits for the resource among `ops`; every one of
    /// them with authorization off (as Kafka answers without an authorizer).
    pub fn authorized_operations(
        &self,
        resource_type: ResourceType,
        name: &str,
        ops: &[AclOperation],
    ) -> i32 {
        ops.iter()
            .filter(|op| self.allows(**op, resource_type, name))
            .fold(0, |bits, op| bits | op.bit())
    }

    /// The ACL image this request sees (empty with authorization off).
    pub fn acls(&self) -> Option<&Acls> {
        self.inner.as_ref().map(|i| &*i.acls)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::security::acl::AclBinding;

    /// Off passes everything (and reports every operation); on, the image decides, and a
    /// super user passes whatever the image says.
    #[test]
    fn off_allows_and_on_decides() {
        let off = Authz::off();
        assert!(off.allows_cluster(AclOperation::Alter));
        assert_eq!(
            off.authorized_operations(ResourceType::Topic, "t", &[AclOperation::Read]),
            AclOperation::Read.bit()
        );
        let acls = Acls::from(vec![AclBinding::from_wire(
            2,
            "t",
            3,
            "User:alice",
            "*",
            4,
            3,
        )
        .unwrap()]);
        let a = Arc::new(Authorizer::new("User:admin", false).unwrap());
        let alice = Authz::new(
            a.clone(),
            Arc::new(acls.clone()),
            KafkaPrincipal::user("alice"),
            "h",
        );
        assert!(alice.allows_topic(AclOperation::Write, "t"));
        assert!(alice.allows_topic(AclOperation::Describe, "t"));
        assert!(!alice.allows_topic(AclOperation::Read, "t"));
        assert!(!alice.allows_cluster(AclOperation::Alter));
        assert_eq!(
            alice.authorized_operations(
                ResourceType::Topic,
                "t",
                crate::security::acl::TOPIC_OPERATIONS
            ),
            AclOperation::Write.bit() | AclOperation::Describe.bit()
        );
        let admin = Authz::new(a, Arc::new(acls), KafkaPrincipal::user("admin"), "h");
        assert!(admin.allows_cluster(AclOperation::Alter));
    }
}
