from django.urls import include, path

from browser.views import (
    checkpoints,
    entries,
    episodes,
    facts,
    procedures,
    shell,
    threads,
    users,
    workspace_admin,
)

app_name = "memories"

workspace_urls = [
    path("", shell.workspace_home, name="workspace"),
    path("facts/", facts.facts_tab, name="facts"),
    path("facts/delete/", facts.facts_delete, name="facts-delete"),
    path("facts/<uuid:pk>/", facts.fact_detail, name="fact"),
    path("facts/<uuid:pk>/edit/", facts.fact_edit, name="fact-edit"),
    path("episodes/", episodes.episodes_tab, name="episodes"),
    path("episodes/delete/", episodes.episodes_delete, name="episodes-delete"),
    path("episodes/<uuid:pk>/", episodes.episode_detail, name="episode"),
    path("episodes/<uuid:pk>/feedback/", episodes.episode_edit, name="episode-edit"),
    path("entries/", entries.entries_tab, name="entries"),
    path("entries/delete/", entries.entries_delete, name="entries-delete"),
    path("entries/<uuid:pk>/", entries.entry_detail, name="entry"),
    path("entries/<uuid:pk>/edit/", entries.entry_edit, name="entry-edit"),
    path("threads/", threads.threads_tab, name="threads"),
    path("threads/delete/", threads.threads_delete, name="threads-delete"),
    path("threads/<uuid:pk>/", threads.thread_detail, name="thread"),
    path("threads/<uuid:pk>/edit/", threads.thread_edit, name="thread-edit"),
    path("checkpoints/", checkpoints.checkpoints_tab, name="checkpoints"),
    path("checkpoints/delete/", checkpoints.checkpoints_delete, name="checkpoints-delete"),
    path("checkpoints/<uuid:pk>/", checkpoints.checkpoint_detail, name="checkpoint"),
    path("procedures/", procedures.procedures_tab, name="procedures"),
    path("procedures/delete/", procedures.procedures_delete, name="procedures-delete"),
    path("procedures/<uuid:pk>/", procedures.procedure_detail, name="procedure"),
    path("procedures/<uuid:pk>/edit/", procedures.procedure_edit, name="procedure-edit"),
    path("users/", users.users_tab, name="users"),
    path("users/delete/", users.users_delete, name="users-delete"),
    path("users/<uuid:pk>/", users.user_detail, name="user"),
    path("users/<uuid:pk>/edit/", users.user_edit, name="user-edit"),
    path("users/<uuid:pk>/merge/", users.user_merge, name="user-merge"),
    path("members/", workspace_admin.members, name="members"),
    path("members/add/", workspace_admin.member_create, name="member-add"),
    path("members/<uuid:membership_id>/role/", workspace_admin.member_role, name="member-role"),
    path("members/<uuid:membership_id>/remove/", workspace_admin.member_delete, name="member-remove"),
    path("api-keys/", workspace_admin.api_keys, name="api-keys"),
    path("api-keys/create/", workspace_admin.api_key_new, name="api-key-create"),
    path("api-keys/<uuid:api_key_id>/revoke/", workspace_admin.api_key_revoke_view, name="api-key-revoke"),
]

urlpatterns = [
    path("", shell.memories_home, name="home"),
    path("<uuid:workspace_id>/", include(workspace_urls)),
]
