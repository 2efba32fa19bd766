app_name = "identities"

urlpatterns = []
