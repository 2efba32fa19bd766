app_name = "memories"

urlpatterns = []
